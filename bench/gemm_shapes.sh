#!/usr/bin/env bash
# `tools/bazel run //bench:gemm_shapes_vs_pytorch [-- --threads 2 --repeats 3]`: see gemm_shapes.py.
# --allow-load: report even from a loaded machine, marked "noisy" (bench/host_check.py).
set -euo pipefail
here="${RUNFILES_DIR:-$0.runfiles}/kiln"
exec python3 "$here/bench/gemm_shapes.py" --gemm-shapes "$here/bench/gemm_shapes" "$@"
