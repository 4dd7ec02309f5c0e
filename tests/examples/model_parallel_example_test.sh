#!/usr/bin/env bash
# //examples:model_parallel trains the CNN split over two devices for a few steps, says which
# devices it used (cpu + cpu, saying so, where there is no GPU) and ends with a JSON line.
set -u
out=$("$1" --steps 4 --batch-size 32 --limit-train 256 --threads 1 2>&1)
code=$?
echo "$out"
[ "$code" -eq 0 ] || { echo "FAIL: exited $code"; exit 1; }
[[ "$out" == *"model parallel: "*" + "* ]] || { echo "FAIL: no line naming the two devices"; exit 1; }
if ! nvidia-smi -L >/dev/null 2>&1; then
  [[ "$out" == *"model parallel: no GPU: cpu + cpu"* ]] || { echo "FAIL: without a GPU it should say cpu + cpu"; exit 1; }
fi
[[ "$out" == *'{"model":"cnn","first":'*'"steps":4'* ]] || { echo "FAIL: no JSON line"; exit 1; }

# --save/--resume: 3 steps then 3 more (across an epoch boundary: 64 images are 2 batches of 32)
# end with the same checkpoint file as 6 steps straight.
dir="${TEST_TMPDIR:-/tmp}/model_parallel_example"
rm -rf "$dir" && mkdir -p "$dir"
flags=(--batch-size 32 --limit-train 64 --threads 1)
"$1" "${flags[@]}" --steps 6 --save "$dir/full.safetensors" >/dev/null 2>&1 || { echo "FAIL: 6-step --save run"; exit 1; }
"$1" "${flags[@]}" --steps 3 --save "$dir/part.safetensors" >/dev/null 2>&1 || { echo "FAIL: 3-step --save run"; exit 1; }
out=$("$1" "${flags[@]}" --steps 6 --save "$dir/part.safetensors" --save-every 2 --resume "$dir/part.safetensors" 2>&1)
[[ "$out" == *"resumed from $dir/part.safetensors at epoch 1 batch 1 (step 3)"* ]] || { echo "FAIL: no resume line: $out"; exit 1; }
cmp -s "$dir/full.safetensors" "$dir/part.safetensors" || { echo "FAIL: 3 + 3 resumed steps differ from 6 steps"; exit 1; }
echo "all ok"
