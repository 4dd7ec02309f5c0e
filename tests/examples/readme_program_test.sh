#!/usr/bin/env bash
# The README's program (examples/readme_program.cc), run as a reader would: two epochs of
# Fashion-MNIST through train::Trainer must reach 75 % test accuracy (chance is 10 %), print
# progress lines with an ETA, and leave a checkpoint that is a safetensors file holding the
# model's tensors and the epoch; run again, it resumes that checkpoint (finished: no step).
set -euo pipefail
bin=$1
ckpt=$TEST_TMPDIR/fashion_mlp.safetensors
out=$("$bin" "$ckpt")
echo "$out"
acc=$(sed -n 's/^test accuracy //p' <<<"$out")
python3 - "$acc" "$ckpt" <<'PY'
import json, struct, sys
acc, path = float(sys.argv[1]), sys.argv[2]
assert acc >= 0.75, f"test accuracy {acc} < 0.75"
with open(path, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
assert "model.1.weight" in header and header["model.1.weight"]["shape"] == [128, 784], sorted(header)
assert header["__metadata__"]["kiln.epoch"] == "2", header["__metadata__"]
print("readme_program_test: accuracy", acc, "checkpoint", len(header) - 1, "tensors")
PY
grep -q '^step 300/1876 epoch 1/2 loss .* eta ' <<<"$out"
again=$("$bin" "$ckpt")
grep -q "^resumed from $ckpt at epoch 2 batch 0 (step 1876)" <<<"$again"
grep -q "^test accuracy $acc\$" <<<"$again"
