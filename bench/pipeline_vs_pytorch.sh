#!/usr/bin/env bash
# `tools/bazel run //bench:pipeline_vs_pytorch [-- --stages 2 --micro 1,2,4,8,16]`: see pipeline_vs_pytorch.py.
# --allow-load: report even from a loaded machine, marked "noisy" (bench/host_check.py).
set -euo pipefail
here="${RUNFILES_DIR:-$0.runfiles}/kiln"
exec python3 "$here/bench/pipeline_vs_pytorch.py" --kiln-bin "$here/bench/pipeline_bench" \
  --pytorch-script "$here/bench/pytorch_pipeline.py" "$@"
