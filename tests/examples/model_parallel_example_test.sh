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
echo "all ok"
