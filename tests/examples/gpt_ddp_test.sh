#!/usr/bin/env bash
# The GPT trainer data-parallel under the launcher: 2 ranks x batch 2 draw the same rows as one
# process with batch 4 (and 2 ranks x 2 accumulated micro-batches the same as batch 8), so the
# losses agree to float rounding; so does --zero 1 (ZeRO-1's sharded AdamW); rank 0 alone prints the
# JSON line; --ddp without the launcher and --zero without --ddp are clear errors.
set -u
launch="$1"
gpt="$2"
source "$(dirname "$0")/gpt_test_setup.sh" gpt_ddp
common+=(--eval-every 0)

one=$("$gpt" "${common[@]}" --batch-size 4 2>&1) || fail "one process exited $?: $one"
two=$("$launch" --nproc-per-node 2 -- "$gpt" "${common[@]}" --ddp --batch-size 2 2>&1) || fail "2 ranks exited $?: $two"
echo "$two"
[[ "$two" == *'"world_size":2'* ]] || fail "the JSON line does not say world_size 2"
[[ "$two" != *"[rank 1] {"* ]] || fail "rank 1 printed a JSON line too"
for key in train_loss val_loss; do
  a=$(field "$(json "$two")" $key) b=$(field "$(json "$one")" $key)
  close "$a" "$b" 1e-4 || fail "$key: 2 ranks x batch 2 gave $a, one process with batch 4 gave $b"
done

eight=$("$gpt" "${common[@]}" --batch-size 8 2>&1) || fail "batch 8 exited $?"
acc=$("$launch" --nproc-per-node 2 -- "$gpt" "${common[@]}" --ddp --batch-size 2 --total-batch-tokens 128 2>&1) ||
  fail "2 ranks with accumulation exited $?: $acc"
[[ "$acc" == *'"grad_accum":2'* ]] || fail "--total-batch-tokens 128 over 2 ranks x 2 x 16 should accumulate 2 micro-batches"
a=$(field "$(json "$acc")" train_loss) b=$(field "$(json "$eight")" train_loss)
close "$a" "$b" 1e-4 || fail "accumulated train_loss $a differs from batch 8's $b"

# --zero 1 from the command line (gpt_zero_test compares the weights): the same losses as plain --ddp.
zero=$("$launch" --nproc-per-node 2 -- "$gpt" "${common[@]}" --ddp --zero 1 --batch-size 2 --total-batch-tokens 128 2>&1) ||
  fail "--zero 1 exited $?: $zero"
[[ "$zero" == *"[rank 0] ZeRO-1: ZeroRedundancyOptimizer(AdamW)"*"sharded over 2 ranks"* ]] || fail "no ZeRO-1 banner: $zero"
[[ "$zero" == *'"zero":1'* ]] || fail "the JSON line does not say zero 1"
a=$(field "$(json "$zero")" train_loss) b=$(field "$(json "$acc")" train_loss)
close "$a" "$b" 1e-6 || fail "--zero 1 train_loss $a differs from plain --ddp's $b"
err=$("$gpt" "${common[@]}" --zero 1 2>&1 >/dev/null)
code=$?
[ "$code" -eq 2 ] || fail "--zero 1 without --ddp exited $code (want 2, a usage error)"
[[ "$err" == *"--zero 1 shards the optimizer state over data-parallel ranks: add --ddp"* ]] || fail "--zero without --ddp: $err"

err=$("$gpt" "${common[@]}" --ddp 2>&1 >/dev/null)
code=$?
[ "$code" -eq 1 ] || fail "--ddp without the launcher exited $code (want 1)"
[[ "$err" == *"--ddp: WORLD_SIZE is not set"* ]] || fail "--ddp without the launcher: $err"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all ok"
