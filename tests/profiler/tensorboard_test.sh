#!/usr/bin/env bash
# TensorBoard's own reader (the `tensorboard` package from PyPI, in a venv cached at
# $KILN_TENSORBOARD_VENV, default ~/.cache/kiln/tensorboard-venv of the real home) reads back
# exactly the scalars Kiln's SummaryWriter wrote. Without the venv the test FAILS and says why.
set -euo pipefail
writer=$1 reader=$2
real_home=$(getent passwd "$(id -u)" | cut -d: -f6)
venv=${KILN_TENSORBOARD_VENV:-$real_home/.cache/kiln/tensorboard-venv}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import tensorboard" 2>/dev/null; then
  echo "tensorboard_test: setting up $venv (python3 -m venv; pip install tensorboard)"
  if ! { python3 -m venv "$venv" && "$venv/bin/pip" install -q tensorboard; } >"$TEST_TMPDIR/venv.log" 2>&1; then
    echo "tensorboard_test: FAILED: cannot install the tensorboard package into $venv:" >&2
    tail -5 "$TEST_TMPDIR/venv.log" >&2
    exit 1
  fi
fi
logdir=$TEST_TMPDIR/tb
"$writer" "$logdir" "$TEST_TMPDIR/expected.json"
"$venv/bin/python" "$reader" "$logdir" "$TEST_TMPDIR/expected.json"
