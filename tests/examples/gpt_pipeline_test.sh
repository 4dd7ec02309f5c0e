#!/usr/bin/env bash
# The GPT trainer pipeline-parallel under the launcher (--pipeline-stages): a tiny GPT (2 blocks,
# width 32, 16 positions) trained 4 steps in 2 stages (GPipe and 1F1B, 2 and 4 micro-batches) and
# in 3 stages ends with the one-process run's weights (merged checkpoint, the GPT's names, one
# wte key) within 1e-5 and its losses; the head's copy of the tied wte stays identical; gradient
# accumulation matches too; wrong flags and launches are clear errors.
set -u
launch="$1"
gpt="$2"
diff_py="$3"
source "$(dirname "$0")/gpt_test_setup.sh" gpt_pipeline
common+=(--eval-every 2 --batch-size 4)

compare() {  # compare <label> <reference output> <reference checkpoint> <output> <checkpoint>
  local label="$1" ref="$2" ref_ckpt="$3" out="$4" ckpt="$5"
  [[ "$out" != *"[rank 1] {"* ]] || fail "$label: rank 1 printed a JSON line too"
  [[ "$out" == *"differs from wte by at most 0"$'\n'* || "$out" == *"differs from wte by at most 0" ]] ||
    fail "$label: the tied copies diverged: $(echo "$out" | grep 'tied head')"
  for key in train_loss val_loss; do
    a=$(field "$(json "$out")" $key) b=$(field "$(json "$ref")" $key)
    close "$a" "$b" 1e-5 || fail "$label: $key $a vs one process $b"
  done
  python3 "$diff_py" "$ref_ckpt" "$ckpt" --tol 1e-5 || fail "$label: the weights differ from one process's"
}

one=$("$gpt" "${common[@]}" --save "$dir/one.safetensors" 2>&1) || fail "one process exited $?: $one"
for spec in "2 gpipe 2" "2 1f1b 4" "2 gpipe 4" "3 1f1b 4"; do
  read -r p sched m <<<"$spec"
  out=$("$launch" --nproc-per-node "$p" -- "$gpt" "${common[@]}" --pipeline-stages "$p" --micro-batches "$m" \
        --schedule "$sched" --save "$dir/p$p$sched$m.safetensors" 2>&1)
  code=$?
  echo "$p stages, $sched, m=$m: $(json "$out")"
  [ "$code" -eq 0 ] || { fail "$p stages $sched m=$m exited $code: $out"; continue; }
  [[ "$out" == *"[rank 0] gpt: custom"*"pipeline: $p stages (gloo), $m micro-batches, $sched"* ]] || fail "no banner: $out"
  [[ "$(json "$out")" == *"\"pipeline_stages\":$p"* ]] || fail "the JSON line does not record the stages"
  compare "$p stages $sched m=$m" "$one" "$dir/one.safetensors" "$out" "$dir/p$p$sched$m.safetensors"
done

# Gradient accumulation: 2 pipeline batches of 4 per optimizer step, as one process accumulates.
acc1=$("$gpt" "${common[@]}" --total-batch-tokens 128 --save "$dir/acc1.safetensors" 2>&1) || fail "accumulating one process exited $?"
acc2=$("$launch" --nproc-per-node 2 -- "$gpt" "${common[@]}" --total-batch-tokens 128 --pipeline-stages 2 \
       --micro-batches 2 --save "$dir/acc2.safetensors" 2>&1) || fail "accumulating pipeline exited $?: $acc2"
[[ "$(json "$acc2")" == *'"grad_accum":2'* ]] || fail "--total-batch-tokens 128 should accumulate 2 batches of 4 x 16"
compare "accumulation" "$acc1" "$dir/acc1.safetensors" "$acc2" "$dir/acc2.safetensors"

expect_error() {  # expect_error <label> <wanted text> <command...>
  local label="$1" want="$2"
  shift 2
  err=$("$@" 2>&1 >/dev/null)
  code=$?
  [ "$code" -ne 0 ] || fail "$label: exited 0"
  [[ "$err" == *"$want"* ]] || fail "$label: no '$want' in: $err"
}
expect_error "no launcher" "--pipeline-stages 2: WORLD_SIZE is not set" "$gpt" "${common[@]}" --pipeline-stages 2
expect_error "micro-batches alone" "--micro-batches needs --pipeline-stages 2 or more" "$gpt" "${common[@]}" --micro-batches 2
expect_error "uneven split" "--batch-size 4 does not split into --micro-batches 3" \
  "$launch" --nproc-per-node 2 -- "$gpt" "${common[@]}" --pipeline-stages 2 --micro-batches 3
expect_error "with --ddp" "--ddp (pipeline x data parallel" \
  "$launch" --nproc-per-node 2 -- "$gpt" "${common[@]}" --pipeline-stages 2 --ddp

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all ok"
