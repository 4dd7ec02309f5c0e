#!/usr/bin/env python3
"""PyTorch side of bench/amp_vs_pytorch.py: one (model, precision) training step timing with
torch.autocast (bf16/f16; f16 with torch.amp.GradScaler) on the models of bench/amp_bench.cc,
median ms per step over blocks, and peak memory (CUDA: max_memory_allocated; CPU: peak RSS).
Prints one JSON line."""
import argparse
import json
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from pytorch_mnist import make_model


def wide_mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                         nn.Linear(4096, 4096), nn.ReLU(), nn.Linear(4096, 10))


def wide_cnn():
    def block(i, o):
        return [nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU()]
    return nn.Sequential(*block(1, 64), *block(64, 128), nn.MaxPool2d(2), *block(128, 256), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(256 * 7 * 7, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="mlp")
    p.add_argument("--precision", default="f32", choices=["f32", "bf16", "f16"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--blocks", type=int, default=3)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    torch.manual_seed(0)
    builders = {"wide_mlp": wide_mlp, "wide_cnn": wide_cnn}
    model = (builders[a.model]() if a.model in builders else make_model(a.model)).to(dev)
    batch = {"wide_mlp": 512, "wide_cnn": 256}.get(a.model, 128)
    x, y = torch.randn(batch, 1, 28, 28, device=dev), torch.randint(0, 10, (batch,), device=dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    low = a.precision != "f32"
    dtype = torch.float16 if a.precision == "f16" else torch.bfloat16
    scaler = torch.amp.GradScaler(dev.type, enabled=a.precision == "f16")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=dtype, enabled=low):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    step(); step(); sync()
    ms = []
    for _ in range(a.blocks):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        sync()
        ms.append((time.perf_counter() - t0) / a.steps * 1e3)
    peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else \
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"model": a.model, "precision": a.precision, "step_ms": statistics.median(ms),
                      "peak_mib": peak / 2**20, "version": torch.__version__}))


if __name__ == "__main__":
    main()
