"""Reads a TensorBoard log directory with TensorBoard's own event reader and checks that it holds
exactly the scalars in EXPECTED_JSON ({tag: [[step, value], ...]}): same tags, same steps, the
same float32 values. Exit 0 when they match."""
import json
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

logdir, expected_path = sys.argv[1], sys.argv[2]
expected = json.load(open(expected_path))
acc = EventAccumulator(logdir, size_guidance={"scalars": 0})
acc.Reload()
tags = sorted(acc.Tags()["scalars"])
assert tags == sorted(expected), f"tags {tags} != {sorted(expected)}"
f32 = lambda v: struct.unpack("f", struct.pack("f", v))[0]
n = 0
for tag, rows in expected.items():
    got = [(e.step, e.value) for e in acc.Scalars(tag)]
    want = [(s, f32(v)) for s, v in rows]
    assert got == want, f"{tag}: read {got}, wrote {want}"
    n += len(got)
print(f"tensorboard {__import__('tensorboard').__version__} read back {n} scalars in {len(tags)} tags exactly")
