"""Kiln's C++ rules: cc_library/cc_binary/cc_test with the flags Kiln's code needs.

The flags travel with the targets, not with a .bazelrc, so a workspace that depends on Kiln
(tests/consumer) compiles Kiln exactly as Kiln's own build does:
  - C++20 (Kiln's headers use designated initialisers, among others);
  - x86-64-v3 (AVX2, FMA, F16C): the `#if __AVX2__`/`__F16C__` kernel paths (GEMM packing,
    f16/bf16 conversion, elementwise loops) compile in; without it a build silently takes the
    scalar paths. `--define=kiln_march=native` tunes for the building CPU instead
    (`--config=native` in Kiln's .bazelrc).
A consumer's own targets that include Kiln's headers use these macros too (they need C++20):
    load("@kiln//:kiln.bzl", "kiln_cc_binary")
The optimisation level is the caller's (`-c opt`: -O2), except where a target sets its own: the
CPU kernels and the collectives' reduction loops -O3; Kiln's glue code, which runs no loops over
elements (core's op entry points, nn, autograd, optim, data, amp, profiler, models, train, the
distributed bookkeeping, flag parsers) and tests -O1, for a shorter cold build. The tensor layer
(//core:tensor) keeps -O2.
"""

load("@rules_cc//cc:defs.bzl", "cc_binary", "cc_library", "cc_test")

def kiln_copts():
    """The compiler flags every Kiln translation unit is built with."""
    return ["-std=c++20"] + select({
        str(Label("//:march_native")): ["-march=native"],
        "//conditions:default": ["-march=x86-64-v3"],
    })

def kiln_opt(level):
    """`level` (say "-O3") in -c opt builds, where it follows and so overrides -c opt's -O2;
    nothing under -c dbg (--config=debug, asan, tsan) or --config=fuzz, which keep their own."""
    return select({
        str(Label("//:opt_levels_off")): [],
        str(Label("//:opt_build")): [level],
        "//conditions:default": [],
    })

def kiln_glue_copts():
    """The copts of Kiln's glue code: -O1 in -c opt builds (kiln_opt). Glue runs no loops over
    elements (op entry points, layers, autograd formulas, optimizers' bookkeeping, data readers,
    the profiler, models, the training loops, the distributed bookkeeping, flag parsers): the
    kernels run those, at -O3. -O1 compiles it about a quarter faster than -O2, with the training
    speed unchanged (docs/building.md)."""
    return kiln_opt("-O1")

def kiln_cc_library(name, copts = [], **kwargs):
    """cc_library with kiln_copts(). Kernel libraries pass alwayslink = 1 (see core/BUILD)."""
    cc_library(name = name, copts = kiln_copts() + copts, **kwargs)

def kiln_cc_binary(name, copts = [], **kwargs):
    """cc_binary with kiln_copts()."""
    cc_binary(name = name, copts = kiln_copts() + copts, **kwargs)

def kiln_cc_test(name, copts = [], **kwargs):
    """cc_test with kiln_copts(), its own code at -O1: a test's loops are small, its compile
    time is not (the libraries it tests keep their own levels)."""
    cc_test(name = name, copts = kiln_copts() + kiln_opt("-O1") + copts, **kwargs)
