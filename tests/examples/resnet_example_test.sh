#!/usr/bin/env bash
# The ResNet recipe (//examples:resnet) end to end, sized to take seconds: ResNet-18 at width 8 on
# the first 512 Fashion-MNIST images (padded to 32x32) for 2 epochs, evaluated on the first 1000
# test images (the whole 10 000 took most of the test's time). The training loss must fall
# from epoch 1 to epoch 2 and beat chance, the closing JSON line must parse and name the recipe
# (resnet18, the width, sgd at lr 0.1 with the cosine schedule), and the test accuracy must beat
# chance (0.1) clearly; --pipeline-stages is refused with a clear message.
set -euo pipefail
bin="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
log="$tmp/resnet.log"
python3 "$(dirname "$0")/../fashion_mnist_subset.py" "$tmp/data" 512 1000
"$bin" --width 8 --epochs 2 --limit-train 512 --batch-size 32 --threads 2 --log-every 4 --data-dir "$tmp/data" | tee "$log"
python3 - "$log" <<'PY'
import json, re, sys
lines = open(sys.argv[1]).read().splitlines()
epochs = [float(m.group(1)) for l in lines if (m := re.match(r"epoch \d+ done: train_loss ([0-9.]+)", l))]
assert len(epochs) == 2, f"expected 2 'epoch N done' lines, got {epochs}"
assert epochs[1] < epochs[0] and epochs[1] < 2.0, f"training loss did not fall well below chance (ln 10 = 2.30): {epochs}"
r = json.loads(lines[-1])
want = {"model": "resnet18", "width": 8, "epochs": 2, "optimizer": "sgd", "lr": 0.1, "schedule": "cosine",
        "steps": 32}
bad = {k: (r.get(k), v) for k, v in want.items() if r.get(k) != v}
assert not bad, f"JSON line fields (got, wanted): {bad}"
assert r["test_accuracy"] > 0.3, f"test accuracy {r['test_accuracy']} is barely above chance"
print(f"ok: train loss {epochs[0]:.3f} -> {epochs[1]:.3f}, test accuracy {r['test_accuracy']:.3f}")
PY
err=$("$bin" --pipeline-stages 2 2>&1 >/dev/null) && { echo "FAIL: --pipeline-stages 2 was accepted"; exit 1; }
[[ "$err" == *"--model resnet18 is not one"* ]] || { echo "FAIL: unclear --pipeline-stages error: $err"; exit 1; }
echo "PASSED: the ResNet recipe trains, logs and refuses the pipeline clearly"
