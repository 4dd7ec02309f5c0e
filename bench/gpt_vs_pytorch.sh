#!/usr/bin/env bash
# `tools/bazel run //bench:gpt_vs_pytorch [-- --models d6 --repeats 3]`: see gpt_vs_pytorch.py.
# --allow-load: report even from a loaded machine, marked "noisy" (bench/host_check.py).
set -euo pipefail
here="${RUNFILES_DIR:-$0.runfiles}/kiln"
exec python3 "$here/bench/gpt_vs_pytorch.py" --kiln-bin "$here/examples/gpt" \
  --pytorch-script "$here/bench/gpt_pytorch.py" "$@"
