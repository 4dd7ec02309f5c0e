#!/usr/bin/env python3
"""Compares the tensors under a key prefix of two safetensors files (standard library only):
prints the largest absolute difference and exits 1 when the key sets differ, a dtype is not
F32/F64, or a difference exceeds the tolerance.
  safetensors_diff.py A B [--prefix model.] [--tol 1e-5]"""
import argparse
import json
import struct
import sys

FORMATS = {"F32": "f", "F64": "d"}


def read(path, prefix):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for key, info in header.items():
        if key == "__metadata__" or not key.startswith(prefix):
            continue
        if info["dtype"] not in FORMATS:
            sys.exit(f"{path}: {key} is {info['dtype']} (F32 or F64 only)")
        lo, hi = info["data_offsets"]
        fmt = FORMATS[info["dtype"]]
        out[key] = struct.unpack(f"<{(hi - lo) // struct.calcsize(fmt)}{fmt}", data[lo:hi])
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--prefix", default="model.")
    p.add_argument("--tol", type=float, default=1e-5)
    a = p.parse_args()
    x, y = read(a.a, a.prefix), read(a.b, a.prefix)
    if set(x) != set(y):
        sys.exit(f"keys differ: only in {a.a}: {sorted(set(x) - set(y))}; only in {a.b}: {sorted(set(y) - set(x))}")
    worst, where = 0.0, ""
    for key in sorted(x):
        if len(x[key]) != len(y[key]):
            sys.exit(f"{key}: {len(x[key])} vs {len(y[key])} values")
        d = max((abs(u - v) for u, v in zip(x[key], y[key])), default=0.0)
        if d > worst:
            worst, where = d, key
    print(f"{len(x)} tensors, largest difference {worst:.3g} ({where or 'none'})")
    if not worst <= a.tol:
        sys.exit(f"difference {worst:.3g} in {where} exceeds {a.tol}")


if __name__ == "__main__":
    main()
