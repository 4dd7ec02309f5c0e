# shellcheck shell=bash disable=SC2154  # B and out are set by the script that sources this
# Sourced, not run, by tools/gpu_first_light.sh and tools/gpu_session_sections.sh on a GPU host without
# Bazel, once B (the unpacked //release:gpu_bundle) and out (the folder for logs) are set. Sets py,
# the host's PyTorch ($PYTHON, else /opt/torch/.venv/bin/python3, else python3), and ldp, the
# LD_LIBRARY_PATH of Kiln's binaries only: the bundle's lib/, $CUDA_PATH or /usr/local/cuda, that
# Python's site-packages/nvidia/*/lib (cuDNN, NCCL, cuBLAS wheels), then the bundle's CUDA runtime
# as a fallback. Defines sec (a section header with the seconds so far), kiln (runs a command with
# ldp), kiln_wrapper (a wrapper in $out that starts a binary of the bundle, named by its path in
# it, with ldp, for the PyTorch scripts, which keep the host's environment so the bundle's
# libraries never shadow PyTorch's) and wrapped (kiln_wrapper for bench/NAME).
py=${PYTHON:-/opt/torch/.venv/bin/python3}
command -v "$py" >/dev/null || py=python3
ldp="$B/lib:${CUDA_PATH:-/usr/local/cuda}/lib64"
for l in "$(dirname "$py")"/../lib/python3*/site-packages/nvidia/*/lib; do [ -d "$l" ] && ldp="$ldp:$l"; done
ldp="$ldp:$B/lib/cuda-fallback"
sec() { echo; echo "######## $* ($SECONDS s)"; }
kiln() { env LD_LIBRARY_PATH="$ldp" "$@"; }
kiln_wrapper() {
  local w="$out/wrap.$(basename "$1")"
  printf '#!/usr/bin/env bash\nexport LD_LIBRARY_PATH=%q\nexec %q "$@"\n' "$ldp" "$B/$1" > "$w"
  chmod +x "$w"
  echo "$w"
}
wrapped() { kiln_wrapper "bench/$1"; }
