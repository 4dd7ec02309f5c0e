#!/usr/bin/env python3
"""PyTorch side of bench/vs_pytorch: the same Fashion-MNIST MLP/CNN as models/mlp_cnn.h, the
same data (the IDX files, normalised with the same mean/std), SGD with momentum 0.9, batch 128.

The strongest eager baseline: the whole training set is a preloaded tensor and each batch is an
index into a fresh per-epoch permutation (no per-sample DataLoader overhead), threads = cores.
Prints progress to stderr and ends with one JSON line like the Kiln trainer's.

--ddp (under torchrun): DistributedDataParallel with the Gloo backend (NCCL on cuda, a GPU per rank); each rank takes the
strided shard [rank::world] of the epoch's permutation (padded to equal length, as
DistributedSampler does), batch size per rank; rank 0 prints the JSON line."""
import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(data_dir, stem):
    for name in (stem + ".gz", stem):
        if os.path.exists(os.path.join(data_dir, name)):
            return os.path.join(data_dir, name)
    raise SystemExit(f"pytorch_mnist: {stem} not found in {data_dir}")


def load(data_dir, train):
    prefix = "train" if train else "t10k"
    x = read_idx(find(data_dir, f"{prefix}-images-idx3-ubyte")).astype(np.float32) / 255.0
    y = read_idx(find(data_dir, f"{prefix}-labels-idx1-ubyte")).astype(np.int64)
    x = (torch.from_numpy(x).unsqueeze(1) - MEAN) / STD
    return x, torch.from_numpy(y)


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--device", default="cpu")
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--limit-train", type=int, default=0)
    p.add_argument("--ddp", action="store_true")
    a = p.parse_args()

    rank, world = 0, 1
    if a.ddp:
        import torch.distributed as dist
        dist.init_process_group("nccl" if a.device.startswith("cuda") else "gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        if a.device.startswith("cuda"):
            a.device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}"

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    x_train, y_train = load(a.data_dir, True)
    x_test, y_test = load(a.data_dir, False)
    if a.limit_train:
        x_train, y_train = x_train[:a.limit_train], y_train[:a.limit_train]
    x_train, y_train, x_test, y_test = (t.to(dev) for t in (x_train, y_train, x_test, y_test))
    model = make_model(a.model).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9)
    net = torch.nn.parallel.DistributedDataParallel(model) if a.ddp else model

    n = x_train.shape[0]
    train_seconds, samples, start = 0.0, 0, time.perf_counter()
    for epoch in range(a.epochs):
        model.train()
        t0 = time.perf_counter()
        perm = torch.randperm(n, device=dev, generator=torch.Generator().manual_seed(a.seed + epoch))
        if world > 1:
            per = (n + world - 1) // world
            perm = torch.cat([perm, perm[:per * world - n]])[rank::world]
        loss_sum, steps = 0.0, 0
        for i in range(0, perm.shape[0], a.batch_size):
            idx = perm[i:i + a.batch_size]
            loss = F.cross_entropy(net(x_train[idx]), y_train[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_sum += loss.item()
            steps += 1
        dt = time.perf_counter() - t0
        train_seconds += dt
        samples += perm.shape[0] * world
        model.eval()
        with torch.no_grad():
            correct, test_loss = 0, 0.0
            for i in range(0, x_test.shape[0], 1000):
                logits = model(x_test[i:i + 1000])
                test_loss += F.cross_entropy(logits, y_test[i:i + 1000], reduction="sum").item()
                correct += (logits.argmax(1) == y_test[i:i + 1000]).sum().item()
        acc = correct / x_test.shape[0]
        print(f"pytorch epoch {epoch + 1}: train_loss {loss_sum / steps:.4f} test_accuracy {acc:.4f} "
              f"({perm.shape[0] * world / dt:.0f} samples/s)", file=__import__("sys").stderr)
    if rank != 0:
        return
    print(json.dumps({"framework": "pytorch", "version": torch.__version__, "model": a.model, "device": a.device,
                      "epochs": a.epochs, "threads": torch.get_num_threads(), "world_size": world, "train_loss": loss_sum / steps,
                      "test_loss": test_loss / x_test.shape[0], "test_accuracy": acc,
                      "samples_per_sec": samples / train_seconds,
                      "wall_seconds": time.perf_counter() - start}))


if __name__ == "__main__":
    main()
