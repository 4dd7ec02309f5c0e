#!/usr/bin/env bash
# Runs Kiln's CUDA tests from //cuda:gpu_bundle on a GPU host that has no Bazel: every binary in
# tests/ (doctest arguments pass through), then with --bench the benchmarks in bench/ and, when
# the host's python3 has PyTorch with CUDA, the side-by-side comparisons in scripts/. Ends with
# "N passed, N failed". CUDA libraries come from the host: $CUDA_PATH or /usr/local/cuda, then
# the Python environment's site-packages/nvidia/*/lib (PyTorch wheels ship cuDNN, NCCL, cuBLAS
# there), then lib/cuda-fallback/ (the CUDA runtime this bundle was built with).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)

bench=0
args=()
for a in "$@"; do
  if [ "$a" = "--bench" ]; then bench=1; else args+=("$a"); fi
done

ldp="$here/lib"
for d in "${CUDA_PATH:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64; do
  [ -d "$d" ] && ldp="$ldp:$d"
done
for py in "${PYTHON:-}" python3 python; do
  [ -n "$py" ] && command -v "$py" >/dev/null 2>&1 || continue
  for sp in $("$py" -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
    for l in "$sp"/nvidia/*/lib; do [ -d "$l" ] && ldp="$ldp:$l"; done
  done
  break
done
ldp="$ldp:$here/lib/cuda-fallback"
export LD_LIBRARY_PATH="$ldp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

passed=0
failed=0
failed_names=()
run() {
  local name=$1
  shift
  echo "==== $name"
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    failed_names+=("$name")
  fi
}
for t in "$here"/tests/*; do
  [ -x "$t" ] && run "$(basename "$t")" "$t" "${args[@]}"
done
if [ "$bench" = 1 ]; then
  for b in "$here"/bench/*; do
    [ -x "$b" ] || continue
    case "$(basename "$b")" in
      allreduce_bench) run allreduce_bench "$b" --backend nccl --nproc 1 ;;  # one GPU: NCCL with 1 rank
      amp_bench) run amp_bench "$b" --device cuda ;;
      *) run "$(basename "$b")" "$b" ;;
    esac
  done
  # Side by side with the host's PyTorch, when it has one with CUDA.
  py=${PYTHON:-python3}
  if "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    export KILN_TORCH_PYTHON=$(command -v "$py")
    run gemm_vs_pytorch "$py" "$here/scripts/gemm_vs_pytorch.py" --gemm-bench "$here/bench/gemm_bench"
    run amp_vs_pytorch "$py" "$here/scripts/amp_vs_pytorch.py" --amp-bench "$here/bench/amp_bench" \
      --pytorch-script "$here/scripts/pytorch_amp.py" --device cuda --models mlp,cnn,wide_mlp,wide_cnn
  else
    echo "skipped: gemm_vs_pytorch, amp_vs_pytorch (no PyTorch with CUDA in $py)"
  fi
fi
((failed)) && echo "failed: ${failed_names[*]}"
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
