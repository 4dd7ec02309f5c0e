"""kiln_fuzz_test: one libFuzzer target, its committed corpus, and the test that runs it.

Under --config=fuzz (clang, //tests/fuzz:fuzzing) the binary links libFuzzer and the test fuzzes
for KILN_FUZZ_SECONDS (default 60) starting from the corpus. In every other build (gcc, asan,
tsan) the binary links replay_main.cc instead and the test feeds it every corpus file once: the
seeds and every crash ever found stay regression cases of the plain `tools/bazel test //...`.
"""

load("//:kiln.bzl", "kiln_cc_binary")

def kiln_fuzz_test(name, srcs, deps):
    """`name`: the target's stem; its corpus lives in corpus/<name>/."""
    kiln_cc_binary(
        name = name + "_fuzzer",
        testonly = 1,
        srcs = srcs,
        linkopts = select({
            ":fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        deps = deps + ["//core"] + select({
            ":fuzzing": [],
            "//conditions:default": [":replay_main"],
        }),
    )
    native.sh_test(
        name = name + "_fuzz_test",
        srcs = ["run_fuzz_test.sh"],
        args = [
            "$(location :%s_fuzzer)" % name,
            "tests/fuzz/corpus/" + name,
        ] + select({
            ":fuzzing": ["fuzz"],
            "//conditions:default": ["replay"],
        }),
        data = [":%s_fuzzer" % name] + native.glob(["corpus/%s/**" % name]),
        # Fuzzing takes KILN_FUZZ_SECONDS plus start-up; replay takes well under a second.
        size = "medium",
        # .ci/run's sanitizer step selects these (and the `threads` tests) by tag.
        tags = ["fuzz"],
    )
