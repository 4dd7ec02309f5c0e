#!/usr/bin/env bash
# The main job pipeline-parallel under the launcher (--pipeline-stages): a 2-stage run trains to
# the one-process run's losses (exactly with one micro-batch; within 1e-6 relative with four,
# where the gradient is summed over micro-batches in another order; interleaved over 2 virtual
# stages per rank, on the CNN), the hybrid 2 stages x 2
# replicas matches 2-rank data parallel, --save/--resume continue exactly, the CNN runs in 3
# stages and cut by time, and a wrong launch is an error.
set -u
launch="$1"
mnist="$2"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
field() { echo "$1" | grep -o "\"$2\":[^,}]*" | tail -1 | cut -d: -f2; }
# close <a> <b> <relative tolerance> (0: the printed values must be identical)
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = (a < 0 ? -a : a);
          exit !(a != "" && b != "" && (t == 0 ? a == b : d <= t * m)) }'; }

# The first 1024 training and 1000 test images (every run here trains on at most 1024): each
# rank then reads 2 MB, not the whole data set, and evaluates 1000 images after each epoch.
dir="${TEST_TMPDIR:-/tmp}/mnist_pipeline"
rm -rf "$dir" && mkdir -p "$dir"
python3 "$(dirname "$0")/../fashion_mnist_subset.py" "$dir/data" 1024 1000 || fail "no Fashion-MNIST subset"
common=(--model mlp --epochs 2 --limit-train 1024 --batch-size 64 --threads 1 --seed 3 --log-every 8 --data-dir "$dir/data")
ref=$("$mnist" "${common[@]}" 2>&1)
[ $? -eq 0 ] || fail "one-process run failed: $ref"
echo "one process: $(echo "$ref" | tail -1)"

run_pipe() {  # run_pipe <ranks> <extra flags...>
  local n="$1"
  shift
  "$launch" --nproc-per-node "$n" -- "$mnist" "${common[@]}" "$@" 2>&1
}

for spec in "1 gpipe 0" "4 1f1b 1e-6" "4 gpipe 1e-6"; do
  read -r m sched tol <<<"$spec"
  out=$(run_pipe 2 --pipeline-stages 2 --micro-batches "$m" --pipeline-schedule "$sched")
  code=$?
  json=$(echo "$out" | grep '\[rank 0\] {' | tail -1)
  echo "2 stages, m=$m, $sched: $json"
  [ "$code" -eq 0 ] || fail "2 stages m=$m $sched exited $code: $out"
  [[ "$out" == *"[rank 0] pipeline: 2 stages (gloo), $m micro-batches, $sched"* ]] || fail "no pipeline banner: $out"
  [[ "$out" != *"[rank 1] {"* ]] || fail "rank 1 printed a JSON line too"
  [[ "$json" == *'"pipeline_stages":2'* ]] || fail "the JSON line does not record the stages: $json"
  for key in train_loss test_loss test_accuracy; do
    close "$(field "$json" $key)" "$(field "$ref" $key)" "$tol" ||
      fail "m=$m $sched: $key $(field "$json" $key) vs one process $(field "$ref" $key) (tolerance $tol)"
  done
done

# --save writes one file per stage after each epoch; a run resumed from them ends where the
# uninterrupted run does (the optimizer's momentum is in the files too).
# The uninterrupted run saves too: the mid-epoch checks below compare with its stage files.
whole=$(run_pipe 2 --pipeline-stages 2 --micro-batches 2 --save "$dir/full.safetensors" | grep '\[rank 0\] {' | tail -1)
out=$(run_pipe 2 --pipeline-stages 2 --micro-batches 2 --save "$dir/run.safetensors" --stop-after-epochs 1)
[ $? -eq 0 ] || fail "--save run failed: $out"
for s in 0 1; do [ -f "$dir/run.stage$s-of-2.safetensors" ] || fail "no checkpoint of stage $s: $(ls "$dir")"; done
out=$(run_pipe 2 --pipeline-stages 2 --micro-batches 2 --resume "$dir/run.safetensors")
[[ "$out" == *"[rank 0] resumed from $dir/run.safetensors at epoch 1"* ]] || fail "no resume line: $out"
resumed=$(echo "$out" | grep '\[rank 0\] {' | tail -1)
echo "resumed: $resumed"
for key in train_loss test_loss; do
  close "$(field "$resumed" $key)" "$(field "$whole" $key)" 0 ||
    fail "resumed: $key $(field "$resumed" $key) vs uninterrupted $(field "$whole" $key)"
done

# Mid-epoch: --save-every and --stop-after-steps stop every stage after step 11 (epoch 0 has 16),
# --auto-resume continues there, and each stage's final file equals the uninterrupted run's.
[ -f "$dir/full.stage0-of-2.safetensors" ] || fail "the uninterrupted --save run wrote no stage files"
out=$(run_pipe 2 --pipeline-stages 2 --micro-batches 2 --save "$dir/mid.safetensors" --save-every 5 --stop-after-steps 11)
[ $? -eq 0 ] || fail "--stop-after-steps run failed: $out"
[[ "$out" == *"[rank 0] stopped after step 11"* ]] || fail "no stop line: $out"
out=$(run_pipe 2 --pipeline-stages 2 --micro-batches 2 --save "$dir/mid.safetensors" --auto-resume)
[[ "$out" == *"[rank 0] resumed from $dir/mid.safetensors at epoch 0 batch 11 (step 11)"* ]] ||
  fail "no mid-epoch resume line: $out"
for s in 0 1; do
  cmp -s "$dir/full.stage$s-of-2.safetensors" "$dir/mid.stage$s-of-2.safetensors" ||
    fail "stage $s: the run stopped at step 11 and resumed differs from the uninterrupted run"
done
# Stage files of different steps (a run killed while its stages saved) are refused on every rank.
run_pipe 2 --pipeline-stages 2 --micro-batches 2 --save "$dir/mix.safetensors" --stop-after-steps 3 >/dev/null
cp "$dir/mix.stage1-of-2.safetensors" "$dir/stage1.step3"
run_pipe 2 --pipeline-stages 2 --micro-batches 2 --save "$dir/mix.safetensors" --auto-resume --stop-after-steps 2 >/dev/null
cp "$dir/stage1.step3" "$dir/mix.stage1-of-2.safetensors"
out=$(run_pipe 2 --pipeline-stages 2 --micro-batches 2 --resume "$dir/mix.safetensors")
[ $? -ne 0 ] || fail "stage files of steps 5 and 3 were resumed from"
[[ "$out" == *"the stage files hold different steps (from 3 to 5"* ]] || fail "mixed stage files: $out"

# Hybrid: 2 stages x 2 replicas trains as 2-rank data parallel (the same shards; the replicas'
# gradients averaged by DDP within each stage).
ddp=$("$launch" --nproc-per-node 2 -- "$mnist" "${common[@]}" --ddp 2>&1 | grep '\[rank 0\] {' | tail -1)
out=$(run_pipe 4 --ddp --pipeline-stages 2 --micro-batches 2)
code=$?
json=$(echo "$out" | grep '\[rank 0\] {' | tail -1)
echo "2-rank DDP: $ddp"
echo "2 stages x 2 replicas: $json"
[ "$code" -eq 0 ] || fail "hybrid exited $code: $out"
[[ "$out" == *"2 data-parallel replicas"* ]] || fail "no hybrid banner: $out"
[[ "$json" == *'"world_size":4'* ]] || fail "hybrid: world_size is not 4: $json"
for key in train_loss test_loss test_accuracy; do
  close "$(field "$json" $key)" "$(field "$ddp" $key)" 1e-6 ||
    fail "hybrid: $key $(field "$json" $key) vs 2-rank DDP $(field "$ddp" $key)"
done

# Interleaved, 2 stages x 2 virtual stages, on the CNN (the MLP's four would leave rank 0 only
# parameterless layers, which is refused): the one-process CNN's losses.
cnn=(--model cnn --epochs 1 --limit-train 256 --batch-size 64 --threads 1 --seed 3 --log-every 2 --data-dir "$dir/data")
cref=$("$mnist" "${cnn[@]}" 2>&1)
out=$("$launch" --nproc-per-node 2 -- "$mnist" "${cnn[@]}" --pipeline-stages 2 --micro-batches 4 \
      --pipeline-schedule interleaved --virtual-stages 2 2>&1)
code=$?
json=$(echo "$out" | grep '\[rank 0\] {' | tail -1)
echo "cnn, 2 stages x 2 virtual, m=4: $json"
[ "$code" -eq 0 ] || fail "cnn interleaved exited $code: $out"
[[ "$out" == *"[rank 0] pipeline: 2 stages (gloo), 4 micro-batches, interleaved x 2 virtual stages"* ]] ||
  fail "no interleaved banner: $out"
[[ "$json" == *'"pipeline_schedule":"interleaved","virtual_stages":2'* ]] || fail "cnn interleaved JSON: $json"
for key in train_loss test_loss test_accuracy; do
  close "$(field "$json" $key)" "$(field "$cref" $key)" 1e-5 ||
    fail "cnn interleaved: $key $(field "$json" $key) vs one process $(field "$cref" $key)"
done
out=$(run_pipe 2 --pipeline-stages 2 --micro-batches 2 --pipeline-schedule interleaved --virtual-stages 2)
[[ "$out" == *"stage 0's layers hold no parameters (split at [0, 1, 2, 3, 6])"* ]] || fail "interleaved mlp with a parameterless rank: $out"

# The CNN in 3 stages, GPipe; 200 images in batches of 64 leave a last batch of 8 that splits.
out=$("$launch" --nproc-per-node 3 -- "$mnist" --model cnn --epochs 1 --limit-train 200 --batch-size 64 \
      --threads 1 --data-dir "$dir/data" --pipeline-stages 3 --micro-batches 4 --pipeline-schedule gpipe 2>&1)
code=$?
[ "$code" -eq 0 ] || fail "cnn in 3 stages exited $code: $out"
[[ "$out" == *'[rank 0] {"model":"cnn"'*'"pipeline_stages":3'* ]] || fail "cnn in 3 stages: no JSON line: $out"
# Cut by measured forward time: the convolutions hold few parameters but most of the time, so the
# first stage ends earlier than the cut by parameters ([0, 7, 10]: convolutions, then the Linears).
out=$("$launch" --nproc-per-node 2 -- "$mnist" --model cnn --epochs 1 --limit-train 128 --batch-size 64 \
      --threads 1 --data-dir "$dir/data" --pipeline-stages 2 --micro-batches 2 --pipeline-balance time 2>&1)
code=$?
[ "$code" -eq 0 ] || fail "cnn cut by time exited $code: $out"
split=$(echo "$out" | grep -o 'layers split at \[[0-9, ]*\] (by time)')
[ -n "$split" ] || fail "cnn cut by time: no banner: $out"
first_cut=$(echo "$split" | grep -o '\[0, [0-9]*' | cut -d' ' -f2)
[ -n "$first_cut" ] && [ "$first_cut" -lt 7 ] || fail "cnn cut by time: $split (want the first cut before layer 7)"
echo "cnn cut by time: $split"
# 100 images, batches of 32: the last batch of 4 does not split into 8; it is left out, saying so.
out=$(run_pipe 2 --pipeline-stages 2 --micro-batches 8 --limit-train 100 --batch-size 32 --epochs 1)
[[ "$out" == *"last batch of 4 images does not split into 8 micro-batches; it is left out"* ]] ||
  fail "no note on the dropped last batch: $out"
[[ "$out" == *'"dropped_batches":1'* ]] || fail "the JSON line does not record the dropped batch: $out"

# A wrong launch: too many ranks, a world that stages do not divide, no launcher.
out=$(run_pipe 3 --pipeline-stages 2)
[ $? -ne 0 ] || fail "3 ranks for 2 stages succeeded"
[[ "$out" == *"--pipeline-stages 2: 3 ranks started; start exactly 2 (one per stage), or add --ddp"* ]] ||
  fail "3 ranks for 2 stages: $out"
out=$(run_pipe 3 --pipeline-stages 2 --ddp)
[[ "$out" == *"--pipeline-stages 2: 3 ranks started; with --ddp the world must be a multiple of 2"* ]] ||
  fail "--ddp with 3 ranks for 2 stages: $out"
err=$("$mnist" --pipeline-stages 2 --epochs 1 2>&1 >/dev/null)
code=$?
[ "$code" -eq 1 ] || fail "--pipeline-stages without the launcher exited $code (want 1)"
[[ "$err" == *"--pipeline-stages: WORLD_SIZE is not set; start one rank per stage"* ]] || fail "no launcher: $err"
# Interleaved flags that cannot run: refused before any rank starts, naming the values.
err=$("$mnist" --pipeline-stages 2 --batch-size 96 --micro-batches 3 --pipeline-schedule interleaved \
      --virtual-stages 2 2>&1 >/dev/null)
[[ "$err" == *"--pipeline-schedule interleaved --virtual-stages 2: pipeline schedule interleaved: 3 micro-batches do not split into rounds of 2"* ]] ||
  fail "interleaved with m = 3: $err"
err=$("$mnist" --pipeline-stages 2 --micro-batches 2 --pipeline-schedule interleaved --virtual-stages 4 2>&1 >/dev/null)
[[ "$err" == *"--pipeline-stages 2 x --virtual-stages 4: the mlp has only 6 layers"* ]] || fail "8 virtual stages: $err"
err=$("$mnist" --pipeline-stages 2 --micro-batches 2 --virtual-stages 2 2>&1 >/dev/null)
[[ "$err" == *"2 virtual stages per rank need the interleaved schedule"* ]] || fail "--virtual-stages with 1f1b: $err"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all ok"
