#!/usr/bin/env bash
# `tools/bazel run //bench:sharded_vs_pytorch [-- --model d6 --rounds 3]`: see sharded_vs_pytorch.py.
# --allow-load: report even from a loaded machine, marked "noisy" (bench/host_check.py).
set -euo pipefail
here="${RUNFILES_DIR:-$0.runfiles}/kiln"
exec python3 "$here/bench/sharded_vs_pytorch.py" --kiln-gpt "$here/examples/gpt" \
  --launch "$here/distributed/launch/launch" --pytorch-script "$here/bench/pytorch_sharded.py" "$@"
