#!/usr/bin/env bash
# Kiln's ResNet-18 against torchvision's on the same weights and input (tagged `pypi`): torchvision
# saves resnet18's state_dict (safetensors) with its eval/train logits, loss, gradients and BatchNorm
# buffers; Kiln loads the weights by name and must match them (resnet_torchvision_check.cc gives the
# tolerances). Both stems: ImageNet's (3 channels, 1000 classes, 64x64 input) and the small-input
# one (1 channel, 10 classes, 32x32). PyTorch comes from the venv at ~/.cache/kiln/torch-venv (or
# KILN_TORCH_VENV), made on first use; safetensors and torchvision (0.29.2, the newest on PyPI that
# accepts torch 2.15) are installed into it when missing (tests/testing/pypi_venv.sh, under a lock
# the other `pypi` tests share). When PyPI cannot be reached the test fails and says why.
set -euo pipefail
check_bin=$1 fixture=$2
source tests/testing/pypi_venv.sh
py=$(kiln_pypi_venv "${KILN_TORCH_VENV:-$(kiln_venv_dir torch-venv)}" torch=torch numpy=numpy \
  safetensors=safetensors torchvision=torchvision==0.29.2) ||
  { echo "resnet_torchvision_test: no PyTorch with torchvision" >&2; exit 1; }
work=${TEST_TMPDIR:-$(mktemp -d)}/resnet_torchvision
for kind in imagenet small; do
  OMP_NUM_THREADS=1 "$py" "$fixture" "$kind" "$work/$kind"
  "$check_bin" "$work/$kind"
done
echo "PASSED: Kiln's ResNet-18 matches torchvision's (logits in eval and train mode, loss, gradients, BatchNorm buffers)"
