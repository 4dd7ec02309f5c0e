#!/usr/bin/env bash
# The benchmarks' command lines: a garbage number, an out-of-range value or an unknown choice is
# refused before anything runs, with a message naming the flag and the value and exit 2 (they
# used to go through atoi, where garbage silently became 0); --help exits 0 and lists --allow-load
# (bench/host_check.h) in every benchmark.
# Arguments: ddp_bench, amp_bench, allreduce_bench, core_bench, eigen_gemm_reference, pipeline_bench,
# attention_bench, fma_peak.
set -u
ddp="$1" amp="$2" allreduce="$3" core="$4" eigen="$5" pipeline="$6" attention="$7" fma="$8"
failures=0

expect() {  # expect <binary> <text in stderr> -- args...
  local bin="$1" want="$2"
  shift 3
  local err code
  err=$(timeout 60 "$bin" "$@" 2>&1 >/dev/null)
  code=$?
  if [ "$code" -ne 2 ] || [[ "$err" != *"$want"* ]]; then
    echo "FAIL: $(basename "$bin") $* -> exit $code, stderr: $err (wanted exit 2 and '$want')"
    failures=$((failures + 1))
  else
    echo "ok: $(basename "$bin") $*"
  fi
}

expect "$ddp" "--steps: expects an integer, got 'abc'" -- --steps abc
expect "$ddp" "--blocks: must be in [1, 10000], got 0" -- --blocks 0
expect "$ddp" "--nproc: expects an integer, got '2x'" -- --nproc 2x
expect "$ddp" "not expected" -- --repeats 3
expect "$amp" "--models: must be one of mlp|cnn|wide_mlp|wide_cnn, got 'resnet'" -- --models mlp,resnet
expect "$amp" "--device: Device: unknown device 'tpu'" -- --device tpu
expect "$amp" "--steps: 1 required" -- --steps=
expect "$allreduce" "--backend: must be one of gloo|nccl, got 'mpi'" -- --backend mpi
expect "$allreduce" "--max-bytes: expects an integer, got '1e3'" -- --max-bytes 1e3
expect "$core" "eigen_reference: File does not exist: /nonexistent/eigen" -- /nonexistent/eigen
expect "$eigen" "dims: expects an integer, got 'abc'" -- 2 64 abc 64
expect "$eigen" "2 dims is not a list of M K N triples" -- 2 64 64
expect "$pipeline" "--micro: expects an integer, got 'x'" -- --micro 1,x,4
expect "$pipeline" "--stages: must be in [2, 64], got 1" -- --stages 1
expect "$attention" "--reps: expects an integer, got 'zero'" -- --reps zero
expect "$attention" "--dtype: must be one of f32|bf16|f16, got 'f64'" -- --dtype f64
expect "$attention" "--seqs: expects an integer, got '2x'" -- --seqs 256,2x
expect "$fma" "--threads: must be in [1, 1024], got 0" -- --threads 0
expect "$fma" "--isa: must be one of best|avx512|avx2, got 'sse'" -- --isa sse

for bin in "$ddp" "$amp" "$allreduce" "$core" "$eigen" "$pipeline" "$attention" "$fma"; do
  out=$("$bin" --help 2>&1)
  code=$?
  if [ "$code" -ne 0 ] || [[ "$out" != *"--help"* ]]; then
    echo "FAIL: $(basename "$bin") --help -> exit $code: $out"
    failures=$((failures + 1))
  elif [ "$bin" != "$eigen" ] && [[ "$out" != *"--allow-load"* ]]; then
    echo "FAIL: $(basename "$bin") --help lists no --allow-load: $out"
    failures=$((failures + 1))
  fi
done

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all benchmark flag checks passed"
