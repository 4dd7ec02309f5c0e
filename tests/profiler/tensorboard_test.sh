#!/usr/bin/env bash
# TensorBoard's own reader (the `tensorboard` package from PyPI, in a venv cached at
# $KILN_TENSORBOARD_VENV, default ~/.cache/kiln/tensorboard-venv of the real home) reads back
# exactly the scalars Kiln's SummaryWriter wrote. The venv is made on first use
# (tests/testing/pypi_venv.sh); when PyPI cannot be reached the test FAILS and says why.
set -euo pipefail
writer=$1 reader=$2
source tests/testing/pypi_venv.sh
py=$(kiln_pypi_venv "${KILN_TENSORBOARD_VENV:-$(kiln_venv_dir tensorboard-venv)}" tensorboard=tensorboard) ||
  { echo "tensorboard_test: FAILED: no tensorboard package" >&2; exit 1; }
logdir=$TEST_TMPDIR/tb
"$writer" "$logdir" "$TEST_TMPDIR/expected.json"
"$py" "$reader" "$logdir" "$TEST_TMPDIR/expected.json"
