#!/usr/bin/env bash
# `tools/bazel run //bench:gemm_vs_pytorch [-- --sizes 1024,4096]`: see gemm_vs_pytorch.py.
# --allow-load: report even from a loaded machine, marked "noisy" (bench/host_check.py).
set -euo pipefail
here="${RUNFILES_DIR:-$0.runfiles}/kiln"
[ -x "$here/bench/gemm_bench" ] || { echo "gemm_vs_pytorch: Kiln was built without CUDA (no bench/gemm_bench)" >&2; exit 1; }
exec python3 "$here/bench/gemm_vs_pytorch.py" --gemm-bench "$here/bench/gemm_bench" "$@"
