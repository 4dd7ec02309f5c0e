"""cuda_library: .cu files compiled by the toolkit's nvcc, wrapped in a cc_library.

Bazel 4.2.3 has no CUDA rules. Each .cu becomes one object (nvcc -c, -std=c++20, -O3,
-Xcompiler -fPIC, --expt-relaxed-constexpr) that a cc_library links with the library's .cc
files and the CUDA runtime. GPU architectures: sm_90 (Hopper) by default; pick others with
`--define=kiln_cuda_archs=80,90` (each NN gives `-gencode arch=compute_NN,code=sm_NN`; add
`ptx` to the list, e.g. `90,ptx`, to also embed compute_XX PTX of the last arch for newer GPUs).

Everything CUDA is built only when @local_cuda found a toolkit (HAS_CUDA). Without one
(or with KILN_NO_CUDA=1) cuda_library is an empty cc_library, so `//...` still builds and the
targets that depend on it link nothing CUDA.
"""

load("@local_cuda//:defs.bzl", "CUDA_PATH", "HAS_CUDA")
load("//:kiln.bzl", "kiln_cc_library")

def _gencode_flags(archs):
    flags = []
    last = None
    for a in archs.split(","):
        a = a.strip()
        if a == "":
            continue
        if a == "ptx":
            if last != None:
                flags.append("-gencode=arch=compute_%s,code=compute_%s" % (last, last))
            continue
        flags.append("-gencode=arch=compute_%s,code=sm_%s" % (a, a))
        last = a
    return flags

def _cuda_objects_impl(ctx):
    archs = ctx.var.get("kiln_cuda_archs", "90")
    headers = []
    for d in ctx.attr.hdrs:
        headers.extend(d.files.to_list())
    outs = []
    for src in ctx.files.srcs:
        out = ctx.actions.declare_file("_objs_cuda/%s/%s.o" % (ctx.label.name, src.basename[:-len(".cu")]))
        args = [
            "-c",
            src.path,
            "-o",
            out.path,
            "-std=c++20",
            "-O3",
            "--expt-relaxed-constexpr",
            "-Xcompiler",
            "-fPIC",
            "-I.",
            "-I" + ctx.bin_dir.path,
        ] + _gencode_flags(archs) + ctx.attr.copts
        ctx.actions.run_shell(
            inputs = [src] + headers,
            outputs = [out],
            command = "%s/bin/nvcc \"$@\"" % CUDA_PATH,
            arguments = args,
            mnemonic = "NvccCompile",
            progress_message = "nvcc %s (sm %s)" % (src.short_path, archs),
            # nvcc runs the host g++ found on PATH.
            use_default_shell_env = True,
        )
        outs.append(out)
    return [DefaultInfo(files = depset(outs))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "copts": attr.string_list(),
    },
)

def cuda_library(name, cu_srcs = [], cu_hdrs = [], srcs = [], hdrs = [], deps = [], nvcc_copts = [], **kwargs):
    """A cc_library of `srcs` (C++) plus `cu_srcs` compiled by nvcc.

    `cu_hdrs` are the headers the .cu files include (own package or others'), found from the
    workspace root. With no CUDA toolkit the library is empty (its headers stay visible, so
    targets that only include them still build).
    """
    if not HAS_CUDA:
        kiln_cc_library(name = name, hdrs = hdrs, **kwargs)
        return
    objs = []
    if cu_srcs:
        _cuda_objects(
            name = name + "_cu_objects",
            srcs = cu_srcs,
            hdrs = cu_hdrs,
            copts = nvcc_copts,
            visibility = ["//visibility:private"],
        )
        objs = [":" + name + "_cu_objects"]
    kiln_cc_library(
        name = name,
        srcs = srcs + objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda_runtime"],
        **kwargs
    )

def if_cuda(if_true, if_false = []):
    """`if_true` when this build has the CUDA toolkit, else `if_false`."""
    return if_true if HAS_CUDA else if_false
