#!/usr/bin/env bash
# The GPT trainer pipeline-parallel under the launcher (--pipeline-stages): a tiny GPT (2 blocks,
# width 32, 16 positions) trained 4 steps in 2 stages (GPipe and 1F1B, 2 and 4 micro-batches) and
# in 3 stages, and interleaved over 2 x 2 virtual stages, ends with the one-process run's weights
# (merged checkpoint, the GPT's names, one wte key) within 1e-5 and its losses; the head's copy of the tied wte stays identical; gradient
# accumulation matches too. The same under --amp bf16 and f16 (a skipped step skipped on every
# stage), --activation-checkpointing,
# --init-from-hf/--save-hf and --ddp (stages x replicas, also with --zero 2 and --fsdp), and runs stopped and resumed (into the
# same split, another split, and across the one-process trainer) end with the uninterrupted run's
# weights and AdamW moments.
# Wrong flags and launches are clear errors.
set -u
launch="$1"
gpt="$2"
diff_py="$3"
source "$(dirname "$0")/gpt_test_setup.sh" gpt_pipeline
common+=(--eval-every 2 --batch-size 4)

compare() {  # compare <label> <reference output> <reference checkpoint> <output> <checkpoint> [<tolerance>]
  local label="$1" ref="$2" ref_ckpt="$3" out="$4" ckpt="$5" tol="${6:-1e-5}"
  [[ "$out" != *"[rank 1] {"* ]] || fail "$label: rank 1 printed a JSON line too"
  [[ "$out" == *"differs from wte by at most 0"$'\n'* || "$out" == *"differs from wte by at most 0" ]] ||
    fail "$label: the tied copies diverged: $(echo "$out" | grep 'tied head')"
  for key in train_loss val_loss; do
    a=$(field "$(json "$out")" $key) b=$(field "$(json "$ref")" $key)
    close "$a" "$b" "$tol" || fail "$label: $key $a vs one process $b"
  done
  python3 "$diff_py" "$ref_ckpt" "$ckpt" --tol "$tol" || fail "$label: the weights differ from one process's"
}
pipe() {  # pipe <stages> <micro-batches> <flags...>: the pipelined trainer under the launcher
  local p="$1" m="$2"
  shift 2
  "$launch" --nproc-per-node "$p" -- "$gpt" "${common[@]}" --pipeline-stages "$p" --micro-batches "$m" "$@" 2>&1
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

# Interleaved 1F1B, 2 stages x 2 virtual stages: rank 0 runs the embedding and block 1, rank 1
# block 0 and the head (the tie still joins ranks 0 and 1). m = 2 and 4 end at one process's
# weights; a run stopped after 2 steps in this split resumes in plain 1F1B and ends where the
# uninterrupted GPipe run does, bit for bit (the merged checkpoint keeps the GPT's names).
for m in 2 4; do
  out=$(pipe 2 "$m" --schedule interleaved --virtual-stages 2 --save "$dir/il$m.safetensors") ||
    { fail "interleaved m=$m exited: $out"; continue; }
  echo "2 stages x 2 virtual, interleaved, m=$m: $(json "$out")"
  [[ "$out" == *"pipeline: 2 stages (gloo), $m micro-batches, interleaved x 2 virtual stages, layers 0,1,2,3,4"* ]] ||
    fail "interleaved m=$m: no banner with the virtual stages and the 4 one-layer chunks: $out"
  [[ "$(json "$out")" == *'"virtual_stages":2'* ]] || fail "interleaved m=$m: the JSON line does not record them"
  compare "interleaved m=$m" "$one" "$dir/one.safetensors" "$out" "$dir/il$m.safetensors"
done
pipe 2 2 --schedule interleaved --virtual-stages 2 --stop-after-steps 2 --save "$dir/ilhalf.safetensors" >/dev/null ||
  fail "stopped interleaved run exited $?"
pipe 2 2 --schedule 1f1b --resume "$dir/ilhalf.safetensors" --save "$dir/ilres.safetensors" >/dev/null ||
  fail "1F1B resuming the interleaved run exited $?"
python3 "$diff_py" "$dir/p2gpipe2.safetensors" "$dir/ilres.safetensors" --tol 0 ||
  fail "interleaved stopped and resumed in 1F1B: the weights differ from the uninterrupted run's"

# Gradient accumulation: 2 pipeline batches of 4 per optimizer step, as one process accumulates.
acc1=$("$gpt" "${common[@]}" --total-batch-tokens 128 --save "$dir/acc1.safetensors" 2>&1) || fail "accumulating one process exited $?"
acc2=$("$launch" --nproc-per-node 2 -- "$gpt" "${common[@]}" --total-batch-tokens 128 --pipeline-stages 2 \
       --micro-batches 2 --save "$dir/acc2.safetensors" 2>&1) || fail "accumulating pipeline exited $?: $acc2"
[[ "$(json "$acc2")" == *'"grad_accum":2'* ]] || fail "--total-batch-tokens 128 should accumulate 2 batches of 4 x 16"
compare "accumulation" "$acc1" "$dir/acc1.safetensors" "$acc2" "$dir/acc2.safetensors"

# --amp bf16: with one micro-batch the stages run the one-process bf16 run's very ops on the same
# rows (the same weights bit for bit, and not the f32 run's: autocast is on); with 4 the rounding
# of the regrouped rows differs, and Adam's first steps (about lr each) can go the other way.
bf=$("$gpt" "${common[@]}" --amp bf16 --save "$dir/bf.safetensors" 2>&1) || fail "one process bf16 exited $?: $bf"
for spec in "2 1 0" "3 1 0" "2 4 5e-3"; do
  read -r p m tol <<<"$spec"
  out=$(pipe "$p" "$m" --amp bf16 --save "$dir/bf$p$m.safetensors") || { fail "bf16 $p stages m=$m exited: $out"; continue; }
  [[ "$(json "$out")" == *'"amp":"bf16"'* ]] || fail "bf16 $p stages m=$m: the JSON line does not record bf16"
  compare "bf16 $p stages m=$m" "$bf" "$dir/bf.safetensors" "$out" "$dir/bf$p$m.safetensors" "$tol"
  ! python3 "$diff_py" "$dir/one.safetensors" "$dir/bf$p$m.safetensors" --tol 1e-4 >/dev/null 2>&1 ||
    fail "bf16 $p stages m=$m: the weights equal the f32 run's to 1e-4 (autocast off?)"
done

# --amp f16: autocast to f16 and a dynamic loss scale. Started at 2^18 the scaled gradients overflow
# f16 on the first steps, which are skipped (the scale halves) on every stage together; with one
# micro-batch the stages run one process's very ops, so the same steps are skipped, the scale ends
# the same and the weights are equal bit for bit. Four micro-batches sum their gradients in f16 over
# fewer rows, so they overflow at other scales (as they would in one process accumulating them):
# they are compared at a scale that never overflows, within the regrouping's rounding. Never the
# f32 run's weights.
f16_hi=$("$gpt" "${common[@]}" --amp f16 --loss-scale 262144 --save "$dir/f16hi.safetensors" 2>&1) ||
  fail "one process f16 at 2^18 exited $?: $f16_hi"
f16_lo=$("$gpt" "${common[@]}" --amp f16 --loss-scale 1024 --save "$dir/f16lo.safetensors" 2>&1) ||
  fail "one process f16 at 1024 exited $?: $f16_lo"
skipped=$(field "$(json "$f16_hi")" skipped_steps) scale=$(field "$(json "$f16_hi")" loss_scale)
[[ "$skipped" =~ ^[0-9]+$ && "$skipped" -ge 1 && "$skipped" -lt 4 ]] ||
  fail "one process f16 at 2^18: $skipped of 4 steps skipped (want some, not all): $(json "$f16_hi")"
[[ "$f16_hi" == *"| scale "*"skipped)"* ]] || fail "one process f16: the progress lines do not show the loss scale"
[ "$(field "$(json "$f16_lo")" skipped_steps)" = 0 ] || fail "one process f16 at 1024 skipped steps: $(json "$f16_lo")"
for spec in "2 1 0 262144 hi" "3 1 0 262144 hi" "2 4 5e-3 1024 lo"; do
  read -r p m tol ls ref <<<"$spec"
  [ "$ref" = hi ] && want="$f16_hi" || want="$f16_lo"
  out=$(pipe "$p" "$m" --amp f16 --loss-scale "$ls" --save "$dir/f16$p$m.safetensors") ||
    { fail "f16 $p stages m=$m exited: $out"; continue; }
  [[ "$(json "$out")" == *'"amp":"f16"'* ]] || fail "f16 $p stages m=$m: the JSON line does not record f16"
  for key in skipped_steps loss_scale; do
    [ "$(field "$(json "$out")" $key)" = "$(field "$(json "$want")" $key)" ] ||
      fail "f16 $p stages m=$m: $key $(field "$(json "$out")" $key), one process $(field "$(json "$want")" $key)"
  done
  compare "f16 $p stages m=$m" "$want" "$dir/f16$ref.safetensors" "$out" "$dir/f16$p$m.safetensors" "$tol"
  ! python3 "$diff_py" "$dir/one.safetensors" "$dir/f16$p$m.safetensors" --tol 1e-4 >/dev/null 2>&1 ||
    fail "f16 $p stages m=$m: the weights equal the f32 run's to 1e-4 (autocast off?)"
done

# --resume: 2 steps, stopped and resumed for 2 more, equal 4 in one go bit for bit (weights and
# AdamW's moments), into the same split with dropout (every stage's generator comes back) and into
# 3 stages; the one-process trainer's checkpoints resume under the pipeline and the reverse (1e-5:
# the micro-batches regroup the sums).
same() {  # same <label> <a> <b> <tolerance>: weights and AdamW moments
  for prefix in model. optim.state.; do
    python3 "$diff_py" "$2" "$3" --prefix "$prefix" --tol "$4" || fail "$1: $prefix differs"
  done
}
pipe 2 2 --dropout 0.1 --save "$dir/d_full.safetensors" >/dev/null || fail "dropout run exited $?"
out=$(pipe 2 2 --dropout 0.1 --stop-after-steps 2 --save "$dir/d_half.safetensors") || fail "stopped run exited: $out"
[[ "$(json "$out")" == *'"steps":2,'* ]] || fail "--stop-after-steps 2 did not stop at step 2: $(json "$out")"
out=$(pipe 2 2 --dropout 0.1 --resume "$dir/d_half.safetensors" --save "$dir/d_res.safetensors") || fail "resume exited: $out"
[[ "$out" == *"resumed from $dir/d_half.safetensors at step 2"* && "$(json "$out")" == *'"steps":4,'* ]] ||
  fail "no resume from step 2 to 4: $out"
same "stopped and resumed (2 stages, dropout)" "$dir/d_full.safetensors" "$dir/d_res.safetensors" 0
pipe 2 2 --stop-after-steps 2 --save "$dir/half.safetensors" >/dev/null || fail "stopped run exited $?"
pipe 3 2 --resume "$dir/half.safetensors" --save "$dir/res3.safetensors" >/dev/null || fail "resume in 3 stages exited $?"
same "2 stages resumed in 3" "$dir/p2gpipe2.safetensors" "$dir/res3.safetensors" 0
"$gpt" "${common[@]}" --resume "$dir/half.safetensors" --save "$dir/res1.safetensors" >/dev/null 2>&1 ||
  fail "one process resuming the pipeline's checkpoint exited $?"
same "pipeline resumed in one process" "$dir/one.safetensors" "$dir/res1.safetensors" 1e-5
"$gpt" "${common[@]}" --stop-after-steps 2 --save "$dir/one_half.safetensors" >/dev/null 2>&1 || fail "one process stop exited"
pipe 2 2 --resume "$dir/one_half.safetensors" --save "$dir/resp.safetensors" >/dev/null || fail "pipeline resuming one process exited"
same "one process resumed in the pipeline" "$dir/one.safetensors" "$dir/resp.safetensors" 1e-5

# --activation-checkpointing: every block, on whichever stage, recomputes in backward (dropout's
# masks replayed), and the weights are the run without it's, bit for bit.
out=$(pipe 2 2 --dropout 0.1 --activation-checkpointing --save "$dir/ac.safetensors") || fail "checkpointing exited: $out"
[[ "$out" == *"activation checkpointing: 2 of 2 blocks recompute their activations in backward"* ]] ||
  fail "the blocks are not checkpointed: $out"
python3 "$diff_py" "$dir/d_full.safetensors" "$dir/ac.safetensors" --tol 0 || fail "checkpointing changed the weights"

# --init-from-hf and --save-hf: from a Hugging Face directory (written by the one-process trainer
# after 2 steps) as one process does it: its weights, and the Hugging Face files it writes, within
# 1e-5; without --save the merged file --save-hf reads is not left behind.
"$gpt" "${common[@]}" --max-steps 2 --save-hf "$dir/hf0" >/dev/null 2>&1 || fail "writing the HF fixture exited $?"
hf=(--data "$dir/corpus.txt" --init-from-hf "$dir/hf0" --max-steps 4 --warmup-steps 1 --eval-every 2 --eval-batches 2
    --batch-size 4 --sample-tokens 0 --threads 1)
hf1=$("$gpt" "${hf[@]}" --save "$dir/hf1.safetensors" --save-hf "$dir/hf1" 2>&1) || fail "one process from HF exited: $hf1"
for spec in "2 2 --save $dir/hf2.safetensors" "3 1"; do
  read -r p m save <<<"$spec"
  out=$("$launch" --nproc-per-node "$p" -- "$gpt" "${hf[@]}" --pipeline-stages "$p" --micro-batches "$m" $save \
        --save-hf "$dir/hf$p" 2>&1) || { fail "$p stages from HF exited: $out"; continue; }
  [[ "$out" == *"[rank 0] gpt: hf"*"wrote Hugging Face layout to $dir/hf$p"* ]] || fail "$p stages from HF: $out"
  [ -z "$save" ] || compare "$p stages from HF" "$hf1" "$dir/hf1.safetensors" "$out" "$dir/hf$p.safetensors"
  python3 "$diff_py" "$dir/hf1/model.safetensors" "$dir/hf$p/model.safetensors" --prefix "" --tol 1e-5 ||
    fail "$p stages: --save-hf's weights differ from one process's"
  cmp -s "$dir/hf1/config.json" "$dir/hf$p/config.json" || fail "$p stages: --save-hf's config.json differs"
  [ "$(ls "$dir/hf$p")" = "config.json"$'\n'"model.safetensors" ] || fail "$p stages: $dir/hf$p holds $(ls "$dir/hf$p")"
done
# --ddp: stages x replicas (rank = replica x stages + stage), each replica reading the rows a
# one-process --ddp rank reads: 2 replicas of batch 2 train as one process with batch 4 (weights
# within 1e-5) in 2 stages (4 ranks; with accumulation too) and 3 (6 ranks), and a hybrid run
# stopped and resumed equals the uninterrupted one bit for bit.
hybrid() {  # hybrid <stages> <ranks> <flags...>
  local p="$1" n="$2"
  shift 2
  "$launch" --nproc-per-node "$n" -- "$gpt" "${common[@]}" --batch-size 2 --ddp --pipeline-stages "$p" \
    --micro-batches 2 "$@" 2>&1
}
for spec in "2 4" "3 6"; do
  read -r p n <<<"$spec"
  out=$(hybrid "$p" "$n" --save "$dir/hy$p.safetensors") || { fail "hybrid $p x 2 exited: $out"; continue; }
  [[ "$out" == *"pipeline: $p stages (gloo)"*"x 2 data-parallel replicas"* && "$(json "$out")" == *"\"world_size\":$n,"* ]] ||
    fail "hybrid $p x 2: no banner or world size: $out"
  compare "hybrid $p stages x 2 replicas" "$one" "$dir/one.safetensors" "$out" "$dir/hy$p.safetensors"
done
out=$(hybrid 2 4 --total-batch-tokens 128 --save "$dir/hyacc.safetensors") || fail "accumulating hybrid exited: $out"
[[ "$(json "$out")" == *'"grad_accum":2'* ]] || fail "hybrid: --total-batch-tokens 128 should accumulate 2 x 2 replicas x 2 x 16"
compare "hybrid accumulation" "$acc1" "$dir/acc1.safetensors" "$out" "$dir/hyacc.safetensors"
# --zero 2 and --fsdp: each stage sharded over its 2 replicas (train/gpt_pipeline_zero.h), the
# same weights and losses as one process.
for z in "--zero 2" "--fsdp"; do
  # shellcheck disable=SC2086  # the flags split into words
  out=$(hybrid 2 4 $z --save "$dir/hyz.safetensors") || { fail "hybrid $z exited: $out"; continue; }
  [[ "$out" == *"per stage: each stage's"*"sharded over its 2 data-parallel rank(s)"* ]] || fail "hybrid $z: no ZeRO line: $out"
  compare "hybrid 2 stages x 2 replicas $z" "$one" "$dir/one.safetensors" "$out" "$dir/hyz.safetensors"
done
hybrid 2 4 --stop-after-steps 2 --save "$dir/hyhalf.safetensors" >/dev/null || fail "stopped hybrid exited $?"
hybrid 2 4 --resume "$dir/hyhalf.safetensors" --save "$dir/hyres.safetensors" >/dev/null || fail "resumed hybrid exited $?"
same "hybrid stopped and resumed" "$dir/hy2.safetensors" "$dir/hyres.safetensors" 0

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
expect_error "virtual stages without interleaving" "pipeline schedule 1f1b: 2 virtual stages per rank need the interleaved schedule" \
  "$gpt" "${common[@]}" --pipeline-stages 2 --micro-batches 2 --virtual-stages 2
expect_error "interleaved, m not a multiple of p" "3 micro-batches do not split into rounds of 2" \
  "$gpt" "${common[@]}" --pipeline-stages 2 --micro-batches 3 --schedule interleaved --virtual-stages 2
expect_error "more virtual stages than layers" "--pipeline-stages 2 x --virtual-stages 3: the GPT has only 4 layers" \
  "$gpt" "${common[@]}" --pipeline-stages 2 --micro-batches 2 --schedule interleaved --virtual-stages 3
expect_error "uneven split" "--batch-size 4 does not split into --micro-batches 3" \
  "$launch" --nproc-per-node 2 -- "$gpt" "${common[@]}" --pipeline-stages 2 --micro-batches 3
expect_error "resume with another --amp" "trained with mixed precision 'none' but this run uses 'bf16/o1'" \
  "$launch" --nproc-per-node 2 -- "$gpt" "${common[@]}" --pipeline-stages 2 --amp bf16 --resume "$dir/half.safetensors"
expect_error "with --zero 1" "--pipeline-stages 2: --zero 1 is not supported with the pipelined GPT" \
  "$launch" --nproc-per-node 4 -- "$gpt" "${common[@]}" --pipeline-stages 2 --ddp --zero 1
expect_error "hybrid world" "3 ranks started; with --ddp the world must be a multiple of 2 (stages x replicas)" \
  "$launch" --nproc-per-node 3 -- "$gpt" "${common[@]}" --pipeline-stages 2 --ddp
expect_error "replicas without --ddp" "4 ranks started; start exactly 2 (one per stage), or add --ddp" \
  "$launch" --nproc-per-node 4 -- "$gpt" "${common[@]}" --pipeline-stages 2

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all ok"
