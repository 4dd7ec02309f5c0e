#!/usr/bin/env bash
# `tools/bazel run //bench:amp_vs_pytorch [-- --device cuda]`: see amp_vs_pytorch.py.
# --allow-load: report even from a loaded machine, marked "noisy" (bench/host_check.py).
set -euo pipefail
here="${RUNFILES_DIR:-$0.runfiles}/kiln"
exec python3 "$here/bench/amp_vs_pytorch.py" --amp-bench "$here/bench/amp_bench" \
  --pytorch-script "$here/bench/pytorch_amp.py" "$@"
