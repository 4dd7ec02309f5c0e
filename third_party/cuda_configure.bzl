"""Detects the CUDA toolkit instead of assuming it.

`@local_cuda//:defs.bzl` exports HAS_CUDA and CUDA_PATH. The toolkit is looked for at
$CUDA_PATH (default /usr/local/cuda); set KILN_NO_CUDA=1 to build as if it were absent.
When present, `@local_cuda//:cuda_headers` exposes its include directory, and `:cuda_runtime`,
`:cublas`, `:cudnn` and `:nccl` link those libraries from its lib64 directory. `core` never depends on this repository.
"""

def _cuda_configure_impl(ctx):
    path = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    disabled = ctx.os.environ.get("KILN_NO_CUDA", "") not in ["", "0"]
    has_cuda = (not disabled) and ctx.path(path + "/bin/nvcc").exists
    ctx.file("defs.bzl", "HAS_CUDA = %s\nCUDA_PATH = %r\n" % (has_cuda, path))
    build = ['package(default_visibility = ["//visibility:public"])']
    if has_cuda:
        ctx.symlink(path + "/include", "include")
        build.append("""
cc_library(
    name = "cuda_headers",
    hdrs = glob(["include/**/*.h", "include/**/*.hpp", "include/**/*.cuh", "include/**/*.inl"]),
    includes = ["include"],
)

cc_library(
    name = "cuda_runtime",
    deps = [":cuda_headers"],
    linkopts = ["-L%s/lib64", "-Wl,-rpath,%s/lib64", "-lcudart"],
)
""" % (path, path))
        # The libraries beside the runtime (cuBLAS/cuBLASLt, cuDNN, NCCL), linked from the same
        # lib64 directory; found at run time through the rpath or LD_LIBRARY_PATH.
        for name, libs in [("cublas", ["cublasLt", "cublas"]), ("cudnn", ["cudnn"]), ("nccl", ["nccl"])]:
            build.append("""
cc_library(
    name = "%s",
    deps = [":cuda_runtime"],
    linkopts = ["-L%s/lib64", "-Wl,-rpath,%s/lib64"%s],
)
""" % (name, path, path, "".join([', "-l%s"' % l for l in libs])))
    ctx.file("BUILD", "\n".join(build) + "\n")

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH", "KILN_NO_CUDA"],
    local = True,
)
