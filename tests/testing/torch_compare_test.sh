#!/usr/bin/env bash
# The op database against PyPI PyTorch: op_dump writes every row's inputs, output and gradients;
# torch_compare.py replays them in torch and fails on any difference. PyPI torch comes from the venv
# at $KILN_TORCH_VENV (default ~/.cache/kiln/torch-venv of the real home), made on first use by
# tests/testing/pypi_venv.sh, or from KILN_TORCH_PYTHON=/path/to/python; when PyPI cannot be
# reached the test FAILS and says why.
set -euo pipefail
dump_bin=$1 script=$2
source tests/testing/pypi_venv.sh
if [ -n "${KILN_TORCH_PYTHON:-}" ]; then
  python=$KILN_TORCH_PYTHON
else
  python=$(kiln_pypi_venv "${KILN_TORCH_VENV:-$(kiln_venv_dir torch-venv)}" torch=torch numpy=numpy) ||
    { echo "torch_compare_test: no PyTorch" >&2; exit 1; }
fi
out=${TEST_TMPDIR:-$(mktemp -d)}/op_db_dump.txt
"$dump_bin" "$out"
OMP_NUM_THREADS=1 "$python" "$script" "$out"
