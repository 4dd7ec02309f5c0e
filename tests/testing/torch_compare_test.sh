#!/usr/bin/env bash
# The op database against PyPI PyTorch: op_dump writes every row's inputs, output and gradients;
# torch_compare.py replays them in torch and fails on any difference. Needs the torch venv
# (PyPI torch in a venv at ~/.cache/kiln/torch-venv of the real home, or
# KILN_TORCH_PYTHON=/path/to/python); without it the test FAILS and says why (it never downloads).
set -euo pipefail
dump_bin=$1 script=$2
real_home=$(getent passwd "$(id -u)" | cut -d: -f6)
python=${KILN_TORCH_PYTHON:-$real_home/.cache/kiln/torch-venv/bin/python}
if [[ ! -x $python ]] || ! "$python" -c 'import torch' 2>/dev/null; then
  echo "torch_compare_test: no PyTorch at $python (set KILN_TORCH_PYTHON or create the venv)" >&2
  exit 1
fi
out=${TEST_TMPDIR:-$(mktemp -d)}/op_db_dump.txt
"$dump_bin" "$out"
OMP_NUM_THREADS=1 "$python" "$script" "$out"
