#!/usr/bin/env bash
# Runs Kiln's CUDA tests from //release:gpu_bundle on a GPU host that has no Bazel: every binary in
# tests/ (doctest arguments pass through), then with --bench the benchmarks in bench/ and the
# side-by-side comparisons with the host's PyTorch in scripts/ (no PyTorch with CUDA is then a
# failure). Ends with "N passed, N failed".
# Python: $PYTHON, else /opt/torch/.venv/bin/python3 (the GPU hosts' PyTorch; $KILN_TORCH_VENV
# overrides the venv), else python3/python on PATH. Kiln's binaries, and only they, get an
# LD_LIBRARY_PATH: lib/ (the bundle's libstdc++, fmt, ...), $CUDA_PATH or /usr/local/cuda, that
# Python's site-packages/nvidia/*/lib (cuDNN, NCCL, cuBLAS wheels), then lib/cuda-fallback/ (the
# CUDA runtime this bundle was built with). The PyTorch scripts run with the host's environment
# untouched, so the bundle's libraries never shadow PyTorch's; they call Kiln's benchmarks through
# wrappers that set it.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)

bench=0
args=()
for a in "$@"; do
  if [ "$a" = "--bench" ]; then bench=1; else args+=("$a"); fi
done

# The first Python that exists, as an absolute path (empty when none).
find_python() {
  local py
  for py in "${PYTHON:-}" "${KILN_TORCH_VENV:-/opt/torch/.venv}/bin/python3" python3 python; do
    [ -n "$py" ] && command -v "$py" >/dev/null 2>&1 && { command -v "$py"; return; }
  done
}
py=$(find_python)

# The nvidia/*/lib folders of the Python environment's wheels: site-packages as Python reports
# them, and the venv's own lib/python3*/site-packages in case Python cannot start.
wheel_lib_dirs() {
  local sp l
  [ -n "$py" ] || return 0
  {
    "$py" -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null
    ls -d "$(dirname "$py")"/../lib/python3*/site-packages 2>/dev/null
  } | while read -r sp; do
    for l in "$sp"/nvidia/*/lib; do [ -d "$l" ] && (cd "$l" && pwd); done
  done | awk '!seen[$0]++'
}

kiln_ldp="$here/lib"
for d in "${CUDA_PATH:-/usr/local/cuda}/lib64" /usr/local/cuda/lib64; do
  [ -d "$d" ] && kiln_ldp="$kiln_ldp:$d"
done
while read -r l; do
  [ -n "$l" ] && kiln_ldp="$kiln_ldp:$l"
done < <(wheel_lib_dirs)
kiln_ldp="$kiln_ldp:$here/lib/cuda-fallback${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "python: ${py:-none}"
echo "LD_LIBRARY_PATH for Kiln's binaries: $kiln_ldp"

command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

passed=0
failed=0
failed_names=()
# Each check runs under a time limit (a hung test fails alone; $KILN_GPU_TEST_TIMEOUT seconds,
# default 300) and reports how long it took.
run() {
  local name=$1 start=$SECONDS
  shift
  echo "==== $name"
  local limit=(timeout "${KILN_GPU_TEST_TIMEOUT:-300}")
  [ "$(type -t "$1")" = function ] && limit=()  # two_ranks: its processes have their own limit
  if "${limit[@]}" "$@"; then
    passed=$((passed + 1))
    echo "---- $name passed ($((SECONDS - start)) s)"
  else
    local rc=$?
    failed=$((failed + 1))
    failed_names+=("$name")
    if [ "$rc" = 124 ]; then
      echo "---- $name FAILED: no result within ${KILN_GPU_TEST_TIMEOUT:-300} s"
    else
      echo "---- $name FAILED (exit $rc, $((SECONDS - start)) s)"
    fi
  fi
}
fail_run() {  # a check that could not even start
  echo "==== $1"
  echo "FAILED: $2"
  failed=$((failed + 1))
  failed_names+=("$1")
}
# Two ranks of COMMAND on this host's first GPU through NCCL: each its own NCCL_HOSTID and
# sockets over loopback (as nccl_test does), since NCCL refuses two ranks on one GPU of one host.
# two_ranks PORT COMMAND...: fails when either rank does.
two_ranks() {
  local port=$1 r rc=0 pids=()
  shift
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      NCCL_HOSTID=kiln-bench-host-$r NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo \
      timeout "${KILN_GPU_TEST_TIMEOUT:-300}" "$@" &
    pids+=($!)
  done
  for r in "${pids[@]}"; do wait "$r" || rc=1; done
  return $rc
}
run_kiln() {
  local name=$1
  shift
  run "$name" env LD_LIBRARY_PATH="$kiln_ldp" "$@"
}

for t in "$here"/tests/*; do
  [ -x "$t" ] && run_kiln "$(basename "$t")" "$t" ${args[@]+"${args[@]}"}
done
if [ "$bench" = 1 ]; then
  for b in "$here"/bench/*; do
    [ -x "$b" ] || continue
    case "$(basename "$b")" in
      allreduce_bench) run_kiln allreduce_bench "$b" --backend nccl --nproc 1 ;;  # one GPU: NCCL with 1 rank
      amp_bench) run_kiln amp_bench "$b" --device cuda ;;
      attention_bench) run_kiln attention_bench "$b" --device cuda --dtype bf16 ;;
      *) run_kiln "$(basename "$b")" "$b" ;;
    esac
  done
  # Side by side with the host's PyTorch: the scripts start Kiln's benchmarks through wrappers
  # carrying Kiln's library path, while they themselves keep the host's.
  wrap=$(mktemp -d)
  trap 'rm -rf "$wrap"' EXIT
  for b in "$here"/bench/*; do
    [ -x "$b" ] || continue
    printf '#!/usr/bin/env bash\nexport LD_LIBRARY_PATH=%q\nexec %q "$@"\n' "$kiln_ldp" "$b" > "$wrap/$(basename "$b")"
    chmod +x "$wrap/$(basename "$b")"
  done
  if [ -z "$py" ]; then
    fail_run pytorch "no Python found (\$PYTHON, ${KILN_TORCH_VENV:-/opt/torch/.venv}/bin/python3, python3, python)"
  elif ! "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    fail_run pytorch "$py has no PyTorch with CUDA: the comparisons gemm_vs_pytorch, amp_vs_pytorch and graph_vs_pytorch cannot run"
  else
    export KILN_TORCH_PYTHON="$py"
    run gemm_vs_pytorch "$py" "$here/scripts/gemm_vs_pytorch.py" --gemm-bench "$wrap/gemm_bench"
    # NCCL all-reduce with 2 ranks on the one GPU (sockets between them): Kiln, then PyTorch.
    run allreduce_nccl_2_ranks two_ranks 29517 env LD_LIBRARY_PATH="$kiln_ldp" "$here/bench/allreduce_bench" \
      --backend nccl
    run allreduce_pytorch_nccl_2_ranks two_ranks 29518 "$py" "$here/scripts/allreduce_pytorch.py"
    # ZeRO-1's collectives over NCCL: the in-place reduce-scatter and the all-gather into a buffer.
    port=29521
    for op in reduce_scatter allgather; do
      run "${op}_nccl_2_ranks" two_ranks $((port++)) env LD_LIBRARY_PATH="$kiln_ldp" \
        "$here/bench/allreduce_bench" --backend nccl --op "$op"
    done
    run amp_vs_pytorch "$py" "$here/scripts/amp_vs_pytorch.py" --amp-bench "$wrap/amp_bench" \
      --pytorch-script "$here/scripts/pytorch_amp.py" --device cuda --models mlp,cnn,wide_mlp,wide_cnn
    run graph_vs_pytorch "$py" "$here/scripts/graph_vs_pytorch.py" --graph-bench "$wrap/graph_bench" \
      --pytorch-script "$here/scripts/pytorch_graph.py" --device cuda
  fi
fi
((failed)) && echo "failed: ${failed_names[*]}"
echo "${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
