#!/usr/bin/env bash
# `tools/bazel run //bench:vs_pytorch [-- --epochs N --models mlp,cnn]`: see vs_pytorch.py.
set -euo pipefail
here="${RUNFILES_DIR:-$0.runfiles}/kiln"
exec python3 "$here/bench/vs_pytorch.py" --kiln-bin "$here/examples/mnist" --launch "$here/distributed/launch/launch" \
  --pytorch-script "$here/bench/pytorch_mnist.py" "$@"
