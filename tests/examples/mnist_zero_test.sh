#!/usr/bin/env bash
# The main job with --ddp --zero 1: under the launcher it trains as plain --ddp does (same seed,
# same test loss), its consolidated checkpoint resumes in a plain --ddp run, it trains under f16
# loss scaling and bf16 o2, Open MPI's mpirun and hand-set srun variables start it with no
# launcher, and --zero without --ddp is a clear error.
# Arguments: the launch binary, the mnist binary.
set -u
launch="$1"
mnist="$2"
dir="${TEST_TMPDIR:-/tmp}/mnist_zero"
rm -rf "$dir" && mkdir -p "$dir"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
field() { echo "$1" | grep -o "\"$2\":[0-9.e-]*" | tail -1 | cut -d: -f2; }

# The first 2000 training and 1000 test images: each rank reads 2 MB, not the whole data set.
python3 "$(dirname "$0")/../fashion_mnist_subset.py" "$dir/data" 2000 1000 || fail "no Fashion-MNIST subset"
common=(--ddp --model mlp --optimizer adam --epochs 2 --limit-train 2000 --log-every 5 --threads 1 --data-dir "$dir/data")
ddp=$("$launch" --nproc-per-node 2 -- "$mnist" "${common[@]}" 2>&1)
[ $? -eq 0 ] || fail "plain --ddp exited non-zero: $ddp"
zero=$("$launch" --nproc-per-node 2 -- "$mnist" "${common[@]}" --zero 1 --save "$dir/zero.safetensors" 2>&1)
code=$?
echo "$zero"
[ "$code" -eq 0 ] || fail "--zero 1 exited $code"
[[ "$zero" == *"[rank 0] ZeRO-1: ZeroRedundancyOptimizer(Adam)"*"sharded over 2 ranks"* ]] || fail "no ZeRO-1 banner"
a=$(field "$ddp" test_loss) b=$(field "$zero" test_loss)
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-5) }' ||
  fail "test loss with --zero 1 ($b) differs from plain --ddp ($a)"
[ -f "$dir/zero.safetensors" ] || fail "no checkpoint written"

# The consolidated checkpoint resumes in an unsharded run.
out=$("$launch" --nproc-per-node 2 -- "$mnist" "${common[@]}" --epochs 3 --resume "$dir/zero.safetensors" 2>&1)
[ $? -eq 0 ] || fail "plain --ddp resuming the ZeRO checkpoint failed: $out"
[[ "$out" == *"[rank 0] epoch 3 done"* ]] || fail "the resumed unsharded run did not train epoch 3: $out"

# A sharded checkpoint: a file per rank beside the main one, resumed by a ZeRO run of the same size.
out=$("$launch" --nproc-per-node 2 -- "$mnist" "${common[@]}" --zero 1 --zero-checkpoint sharded \
      --save "$dir/sharded.safetensors" --stop-after-epochs 1 2>&1)
[ $? -eq 0 ] || fail "--zero-checkpoint sharded exited non-zero: $out"
for r in 0 1; do
  [ -f "$dir/sharded.safetensors.zero-shard-$r-of-2" ] || fail "no shard file for rank $r: $(ls "$dir")"
done
out=$("$launch" --nproc-per-node 2 -- "$mnist" "${common[@]}" --zero 1 --resume "$dir/sharded.safetensors" 2>&1)
[ $? -eq 0 ] || fail "resuming the sharded checkpoint failed: $out"
[[ "$out" == *"[rank 0] resumed from $dir/sharded.safetensors at epoch 1"* && "$out" == *"[rank 0] epoch 2 done"* ]] ||
  fail "the sharded checkpoint did not resume into epoch 2: $out"

# Mixed precision: f16 loss scaling (each rank checks its shard; the skip is agreed), and o2 (a
# bf16 model: the wrapped optimizer keeps f32 master copies of this rank's shards only).
for amp in "--amp f16" "--amp bf16 --amp-mode o2"; do
  out=$("$launch" --nproc-per-node 2 -- "$mnist" "${common[@]}" --zero 1 --epochs 1 $amp 2>&1)
  [ $? -eq 0 ] || fail "--zero 1 $amp exited non-zero: $out"
  acc=$(field "$out" test_accuracy)
  awk -v a="$acc" 'BEGIN { exit !(a > 0.5) }' || fail "--zero 1 $amp: test accuracy $acc after 1 epoch (want > 0.5)"
done

# mpirun starts the ranks; init_process_group reads OMPI_COMM_WORLD_* (MASTER_ADDR defaults to 127.0.0.1).
if ! command -v mpirun >/dev/null; then
  fail "mpirun is not installed: install Debian's openmpi-bin (tools/bazel installs it)"
else
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  out=$(MASTER_PORT=$port timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_PORT \
        "$mnist" "${common[@]}" --zero 1 --epochs 1 2>&1)
  [ $? -eq 0 ] || fail "mpirun -np 2 mnist --ddp --zero 1 failed: $out"
  [[ "$out" == *'"world_size":2'* ]] || fail "mpirun: the JSON line does not say world_size 2: $out"
fi

# srun's variables, set by hand (no Slurm here): the two ranks find each other through them alone.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
for r in 0 1; do
  env -u RANK -u WORLD_SIZE -u MASTER_ADDR SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r \
      SLURM_NODELIST='127.0.0.1' MASTER_PORT=$port timeout 300 "$mnist" "${common[@]}" --zero 1 --epochs 1 \
      >"$dir/slurm$r.out" 2>&1 &
done
wait
grep -q '"world_size":2' "$dir/slurm0.out" || { fail "hand-set SLURM_* run:"; cat "$dir/slurm0.out" "$dir/slurm1.out"; }

err=$("$mnist" --zero 1 --epochs 1 2>&1 >/dev/null)
[[ "$err" == *"--zero 1 shards the optimizer state over data-parallel ranks: add --ddp"* ]] ||
  fail "--zero without --ddp: $err"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all ok"
