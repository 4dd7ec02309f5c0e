#!/usr/bin/env python3
"""Writes the first N training and M test images of Fashion-MNIST (Debian's dataset-fashion-mnist)
as plain IDX files in OUT, for the main job's --data-dir (standard library only):
  fashion_mnist_subset.py OUT N_TRAIN N_TEST [--from DIR]
The shell tests train on a few thousand images and compare runs with each other; the full
10 000-image test set, evaluated after every epoch of every rank, and the 60 000 training images
each process would decompress, were most of their time. The images are the real ones, in their
order: a run with --limit-train N <= N_TRAIN trains exactly as it would on the full set."""
import argparse
import gzip
import os
import struct
import sys


def copy_head(src_dir, dst_dir, name, count):
    """Copies the header and the first `count` items of IDX file `name` (.gz in src_dir)."""
    src = os.path.join(src_dir, name + ".gz")
    opener = gzip.open if os.path.exists(src) else open
    if opener is open:
        src = os.path.join(src_dir, name)
    with opener(src, "rb") as f:
        magic = f.read(4)
        ndim = magic[3]
        dims = list(struct.unpack(f">{ndim}I", f.read(4 * ndim)))
        if count > dims[0]:
            sys.exit(f"{src} holds {dims[0]} items, {count} asked for")
        item = 1
        for d in dims[1:]:
            item *= d
        body = f.read(count * item)
    dims[0] = count
    with open(os.path.join(dst_dir, name), "wb") as out:
        out.write(magic + struct.pack(f">{ndim}I", *dims) + body)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("n_train", type=int)
    p.add_argument("n_test", type=int)
    p.add_argument("--from", dest="src", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for split, n in (("train", a.n_train), ("t10k", a.n_test)):
        copy_head(a.src, a.out, f"{split}-images-idx3-ubyte", n)
        copy_head(a.src, a.out, f"{split}-labels-idx1-ubyte", n)


if __name__ == "__main__":
    main()
