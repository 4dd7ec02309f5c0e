#!/usr/bin/env bash
# Kiln's ResNet-18 against torchvision's on the same weights and input (tagged `pypi`): torchvision
# saves resnet18's state_dict (safetensors) with its eval/train logits, loss, gradients and BatchNorm
# buffers; Kiln loads the weights by name and must match them (resnet_torchvision_check.cc gives the
# tolerances). Both stems: ImageNet's (3 channels, 1000 classes, 64x64 input) and the small-input
# one (1 channel, 10 classes, 32x32). PyTorch comes from the venv at ~/.cache/kiln/torch-venv (or
# KILN_TORCH_VENV), made on first use; safetensors and torchvision (0.29.2, the newest on PyPI that
# accepts torch 2.15) are installed into it when missing, so the test does not depend on which
# other `pypi` test ran first. When PyPI cannot be reached the test fails and says why.
set -euo pipefail
check_bin=$1 fixture=$2
home=$(getent passwd "$(id -u)" | cut -d: -f6)
venv=${KILN_TORCH_VENV:-$home/.cache/kiln/torch-venv}
py=$venv/bin/python3
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "setting up PyTorch from PyPI in $venv (first use; a few GB)"
  { python3 -m venv "$venv" && "$py" -m pip install -q torch numpy; } ||
    { echo "resnet_torchvision_test: cannot install torch from PyPI into $venv" >&2; exit 1; }
fi
if ! "$py" -c 'import safetensors' 2>/dev/null; then
  echo "installing safetensors from PyPI into $venv"
  "$py" -m pip install -q safetensors || { echo "resnet_torchvision_test: cannot install safetensors" >&2; exit 1; }
fi
if ! "$py" -c 'import torchvision' 2>/dev/null; then
  echo "installing torchvision 0.29.2 from PyPI into $venv"
  "$py" -m pip install -q "torchvision==0.29.2" || { echo "resnet_torchvision_test: cannot install torchvision" >&2; exit 1; }
fi
work=${TEST_TMPDIR:-$(mktemp -d)}/resnet_torchvision
for kind in imagenet small; do
  OMP_NUM_THREADS=1 "$py" "$fixture" "$kind" "$work/$kind"
  "$check_bin" "$work/$kind"
done
echo "PASSED: Kiln's ResNet-18 matches torchvision's (logits in eval and train mode, loss, gradients, BatchNorm buffers)"
