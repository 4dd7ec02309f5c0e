#!/usr/bin/env bash
# The README's program (examples/readme_program.cc), run as a reader would: one epoch of
# Fashion-MNIST must reach 75 % test accuracy (it reaches 79 %; chance is 10 %) and leave a
# checkpoint that is a safetensors file holding the model's tensors and the epoch.
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
assert header["__metadata__"]["kiln.epoch"] == "1", header["__metadata__"]
print("readme_program_test: accuracy", acc, "checkpoint", len(header) - 1, "tensors")
PY
