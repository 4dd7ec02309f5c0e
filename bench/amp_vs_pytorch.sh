#!/usr/bin/env bash
# `tools/bazel run //bench:amp_vs_pytorch [-- --device cuda]`: see amp_vs_pytorch.py.
set -euo pipefail
here="${RUNFILES_DIR:-$0.runfiles}/kiln"
exec python3 "$here/bench/amp_vs_pytorch.py" --amp-bench "$here/bench/amp_bench" \
  --pytorch-script "$here/bench/pytorch_amp.py" "$@"
