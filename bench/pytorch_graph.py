#!/usr/bin/env python3
"""PyTorch side of bench/graph_vs_pytorch.py: the MNIST MLP training step (784-256-256-10, SGD
with momentum, batch 128) timed eager or under torch.compile(mode="reduce-overhead"), which
replays CUDA graphs of the model's forward and backward (the fused optimizer step runs eagerly).
Batches cycle through a few device-resident ones, as in bench/graph_bench.cc. Median ms per step
over blocks; prints one JSON line."""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from pytorch_mnist import make_model


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="eager", choices=["eager", "reduce-overhead"])
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--warmup", type=int, default=20, help="steps before timing (compilation happens here)")
    a = p.parse_args()
    dev = torch.device(a.device)
    torch.manual_seed(0)
    model = make_model("mlp").to(dev)
    # Fused SGD, eager in both modes: compiling opt.step() apart under reduce-overhead reads the
    # backward graph's gradients after its next replay overwrote them ("accessing tensor output of
    # CUDAGraphs that has been overwritten", torch 2.11 on an H200).
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, fused=dev.type == "cuda")
    xs = [torch.randn(a.batch_size, 1, 28, 28, device=dev) for _ in range(4)]
    ys = [torch.randint(0, 10, (a.batch_size,), device=dev) for _ in range(4)]

    def loss_of(x, y):
        return F.cross_entropy(model(x), y)

    def opt_step():
        opt.step()

    compiled = a.mode == "reduce-overhead"
    if compiled:
        loss_of = torch.compile(loss_of, mode="reduce-overhead")

    def step(i):
        if compiled:
            torch.compiler.cudagraph_mark_step_begin()
        opt.zero_grad(set_to_none=True)
        loss = loss_of(xs[i % 4], ys[i % 4])
        loss.backward()
        opt_step()

    for i in range(a.warmup):
        step(i)
    torch.cuda.synchronize(dev)
    ms = []
    i = a.warmup
    for _ in range(a.blocks):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step(i)
            i += 1
        torch.cuda.synchronize(dev)
        ms.append((time.perf_counter() - t0) / a.steps * 1e3)
    print(json.dumps({"mode": a.mode, "batch_size": a.batch_size, "step_ms": statistics.median(ms),
                      "version": torch.__version__}))


if __name__ == "__main__":
    main()
