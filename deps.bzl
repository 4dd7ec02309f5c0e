"""The repositories Kiln's targets need, for Kiln's own WORKSPACE and for a workspace built on it.

A consumer's WORKSPACE (tests/consumer/WORKSPACE is a tested one):

    local_repository(name = "kiln", path = "/path/to/kiln")
    load("@kiln//:deps.bzl", "kiln_dependencies")
    kiln_dependencies()

Everything comes from this machine: `@kiln_system` exposes Debian's libraries under /usr
(third_party/system.BUILD), `@local_cuda` the CUDA toolkit when there is one, and the small local
stand-ins for the rule repositories Bazel 4.2.3 would otherwise download (rules_cc, rules_java,
remote_coverage_tools). A repository the workspace already declared is left as it is.

This file loads nothing from other repositories, so a WORKSPACE can load it before any exist.
"""

load("//third_party:cuda_configure.bzl", "cuda_configure")

def _kiln_dir_impl(rctx):
    # The directory holding `anchor` inside Kiln's tree, linked entry by entry (a
    # local_repository's path would be relative to the consumer's workspace, not to Kiln).
    src = rctx.path(rctx.attr.anchor).dirname
    for child in src.readdir():
        rctx.symlink(child, child.basename)

_kiln_dir = repository_rule(
    implementation = _kiln_dir_impl,
    attrs = {"anchor": attr.label(allow_single_file = True)},
    local = True,
)

def _kiln_system_impl(rctx):
    for child in rctx.path("/usr").readdir():
        rctx.symlink(child, child.basename)
    rctx.symlink(rctx.attr.build_file, "BUILD.bazel")
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)

_kiln_system = repository_rule(
    implementation = _kiln_system_impl,
    attrs = {"build_file": attr.label(allow_single_file = True)},
    local = True,
)

def kiln_dependencies():
    """Declares @kiln_system, @local_cuda and the offline rule repositories (once each)."""
    for name in ["rules_cc", "rules_java", "remote_coverage_tools"]:
        if not native.existing_rule(name):
            _kiln_dir(name = name, anchor = Label("//third_party/%s:WORKSPACE" % name))
    if not native.existing_rule("kiln_system"):
        _kiln_system(name = "kiln_system", build_file = Label("//third_party:system.BUILD"))
    if not native.existing_rule("local_cuda"):
        cuda_configure(name = "local_cuda")
