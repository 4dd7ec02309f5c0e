#!/usr/bin/env bash
# The GPU checks of docs/benchmarks.md's "On a GPU" section, in one go on a GPU host without
# Bazel: gpu_first_light.sh BUNDLE_DIR DATA_DIR [OUT_DIR]. BUNDLE_DIR is the unpacked
# //release:gpu_bundle, DATA_DIR holds Fashion-MNIST's four .gz files. Runs every CUDA test, then
# memcheck over every test binary (API errors the tests provoke on purpose not reported) and
# racecheck over the kernel tests, the main job on CPU and GPU (f32, bf16, f16; MLP and CNN),
# 2-rank DDP on the one GPU through NCCL, eager vs --cuda-graph, and the benchmarks beside the
# host's PyTorch. Logs go to OUT_DIR (default ./gpu_first_light); a summary is printed.
set -u
B=$(cd "${1:?bundle dir}" && pwd) D=$(cd "${2:?data dir}" && pwd)
out=${3:-$PWD/gpu_first_light}
mkdir -p "$out"
# py, ldp (Kiln's library path), sec, kiln and wrapped.
# shellcheck source=tools/gpu_env.sh
. "$(dirname "${BASH_SOURCE[0]}")/gpu_env.sh"

sec tests
KILN_GPU_TEST_TIMEOUT=120 "$B/run_gpu_tests.sh" > "$out/tests.log" 2>&1
grep -E "^---- |passed, " "$out/tests.log"

sec sanitizers
for t in "$B"/tests/*; do
  n=$(basename "$t")
  # A device reset; several processes; no GPU work at all (the sanitizer then exits 255).
  case $n in cuda_failure_paths_test | nccl_test | kernel_coverage_test) continue ;; esac
  (timeout 300 env LD_LIBRARY_PATH="$ldp" compute-sanitizer --tool memcheck --report-api-errors no \
     --error-exitcode 9 "$t" > "$out/memcheck.$n.log" 2>&1
   echo "memcheck exit $? $n" >> "$out/memcheck.$n.log") &
done
for n in cuda_elementwise_test cuda_reduce_test cuda_layer_norm_test cuda_attention_test cuda_cross_entropy_test \
  cuda_optim_test; do
  (timeout 300 env LD_LIBRARY_PATH="$ldp" compute-sanitizer --tool racecheck --error-exitcode 9 "$B/tests/$n" \
     > "$out/racecheck.$n.log" 2>&1
   echo "racecheck exit $? $n" >> "$out/racecheck.$n.log") &
done
wait
for f in "$out"/memcheck.*.log "$out"/racecheck.*.log; do tail -1 "$f"; done

sec main job
for model in mlp cnn; do
  for run in "--device cpu" "--device cuda" "--device cuda --amp bf16" "--device cuda --amp f16"; do
    # shellcheck disable=SC2086
    kiln "$B/bin/mnist" --data-dir "$D" --epochs 1 --model $model $run > "$out/mnist.log.tmp" 2>&1
    echo "$model $run: exit $? $(grep -o 'test_accuracy [0-9.]* ([0-9]* samples/s)' "$out/mnist.log.tmp")"
    cat "$out/mnist.log.tmp" >> "$out/mnist.log"
  done
done
for g in "" --cuda-graph; do
  kiln "$B/bin/mnist" --data-dir "$D" --epochs 1 --model mlp --device cuda --schedule constant $g > "$out/mnist.log.tmp" 2>&1
  echo "mlp --schedule constant $g: exit $? $(grep -o 'train_loss [0-9.]* .*samples/s)' "$out/mnist.log.tmp")"
  cat "$out/mnist.log.tmp" >> "$out/mnist.log"
done
rm -f "$out/mnist.log.tmp"

sec ddp
# Two ranks on the first GPU: each its own NCCL_HOSTID and sockets (NCCL refuses two ranks on one
# GPU of one host otherwise); batch 64 per rank, the single rank's global batch.
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29611 \
    NCCL_HOSTID=kiln-host-$r NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo \
    timeout 300 env LD_LIBRARY_PATH="$ldp" "$B/bin/mnist" --data-dir "$D" --epochs 1 --device cuda --model mlp \
    --ddp --batch-size 64 > "$out/ddp$r.log" 2>&1 &
done
wait
grep -E "test_accuracy [0-9.]* \(|exposed comm" "$out/ddp0.log" | tail -2

sec benchmarks
kiln "$B/bench/cuda_bench" > "$out/cuda_bench.log" 2>&1
head -14 "$out/cuda_bench.log"
KILN_TORCH_PYTHON=$py "$py" "$B/scripts/gemm_vs_pytorch.py" --gemm-bench "$(wrapped gemm_bench)" > "$out/gemm.log" 2>&1
grep -v "^{" "$out/gemm.log" | tail -22
KILN_TORCH_PYTHON=$py "$py" "$B/scripts/amp_vs_pytorch.py" --amp-bench "$(wrapped amp_bench)" \
  --pytorch-script "$B/scripts/pytorch_amp.py" --device cuda --models mlp,cnn,wide_mlp > "$out/amp.log" 2>&1
grep -v "^{\|^+" "$out/amp.log" | tail -12
KILN_TORCH_PYTHON=$py "$py" "$B/scripts/graph_vs_pytorch.py" --graph-bench "$(wrapped graph_bench)" \
  --pytorch-script "$B/scripts/pytorch_graph.py" --device cuda > "$out/graph.log" 2>&1
grep -v "^{\|^+" "$out/graph.log" | tail -8
sec done
