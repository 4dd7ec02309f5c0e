#!/usr/bin/env bash
# The main job data-parallel under the launcher: 2 ranks train, rank 0 alone writes the
# checkpoint (the others wait at a barrier), a 2-rank --resume continues it, and --ddp without
# the launcher is a clear error.
set -u
launch="$1"
mnist="$2"
dir="${TEST_TMPDIR:-/tmp}/mnist_ddp"
rm -rf "$dir" && mkdir -p "$dir"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The first 3000 training and 1000 test images: each rank reads 3 MB, not the whole data set
# (beside $dir, which must hold the checkpoint alone).
data="$dir.data"
python3 "$(dirname "$0")/../fashion_mnist_subset.py" "$data" 3000 1000 || fail "no Fashion-MNIST subset"
common=(--ddp --model mlp --epochs 2 --limit-train 3000 --log-every 5 --threads 1 --data-dir "$data")
out=$("$launch" --nproc-per-node 2 -- "$mnist" "${common[@]}" --save "$dir/ckpt.safetensors" \
      --stop-after-epochs 1 2>&1)
code=$?
echo "$out"
[ "$code" -eq 0 ] || fail "first run exited $code"
[[ "$out" == *"[rank 0] data parallel: 2 ranks (gloo)"* ]] || fail "no data-parallel banner from rank 0"
[[ "$out" == *'"world_size":2'* ]] || fail "the JSON line does not say world_size 2"
[[ "$out" != *"[rank 1] {"* ]] || fail "rank 1 printed a JSON line too"
[[ "$out" != *"[rank 1] epoch"* ]] || fail "rank 1 logged progress"
# 3000 images / 2 ranks / batch 128 = 12 steps per rank per epoch.
[[ "$out" == *"epoch 1 step 10/12"* ]] || fail "each rank should take 12 steps of its 1500-image shard"
[ -f "$dir/ckpt.safetensors" ] || fail "no checkpoint written"
leftovers=$(ls "$dir" | grep -v '^ckpt.safetensors$')
[ -z "$leftovers" ] || fail "stray files next to the checkpoint: $leftovers"

out=$("$launch" --nproc-per-node 2 -- "$mnist" "${common[@]}" --resume "$dir/ckpt.safetensors" 2>&1)
code=$?
echo "$out"
[ "$code" -eq 0 ] || fail "resumed run exited $code"
[[ "$out" == *"[rank 0] resumed from $dir/ckpt.safetensors at epoch 1"* ]] || fail "no resume line"
[[ "$out" == *"[rank 0] epoch 2 done"* ]] || fail "the resumed run did not train epoch 2"
acc=$(echo "$out" | grep -o '"test_accuracy":[0-9.]*' | tail -1 | cut -d: -f2)
awk -v a="$acc" 'BEGIN { exit !(a > 0.6) }' || fail "test accuracy $acc after 2 epochs on 3000 images (want > 0.6)"

# f16 with loss scaling under DDP: the ranks share the skip decision (an all-reduced found-inf).
out=$("$launch" --nproc-per-node 2 -- "$mnist" --ddp --model mlp --epochs 1 --limit-train 2000 --threads 1 \
      --data-dir "$data" --amp f16 2>&1)
code=$?
[ "$code" -eq 0 ] || fail "--ddp --amp f16 exited $code: $out"
[[ "$out" == *'"amp":"f16'* ]] || fail "--ddp --amp f16: the JSON line does not record f16: $out"

err=$("$mnist" --ddp --epochs 1 2>&1 >/dev/null)
code=$?
[ "$code" -eq 1 ] || fail "--ddp without the launcher exited $code (want 1)"
[[ "$err" == *"--ddp: WORLD_SIZE is not set; start the ranks with"* ]] || fail "--ddp without the launcher: $err"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all ok"
