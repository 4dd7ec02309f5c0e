#!/usr/bin/env python3
"""PyTorch's torch.distributed.pipelining on the model, split and micro-batches of
//bench:pipeline_bench: an MLP of 16 layers (8 x Linear(512, 512) + Tanh) cut after the same
layers as Kiln's parameter-balanced split, 32 rows per micro-batch, MSE loss, SGD, Gloo on
127.0.0.1, one thread per rank, ScheduleGPipe and Schedule1F1B. Rank 0 times zero_grad + step +
optimizer step (as Kiln's bench does); the last line is JSON with the same fields."""
import argparse
import json
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WIDTH, ROWS = 512, 32


def stage_layers(rank, p):
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()]
    # Kiln's balanced split ends each stage right after its last Linear.
    cuts = [0] + [2 * (8 // p) * k - 1 for k in range(1, p)] + [len(layers)]
    return torch.nn.Sequential(*layers[cuts[rank]:cuts[rank + 1]])


def worker(rank, p, port, steps, micro, queue):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=p)
    results = []
    for name, cls in (("gpipe", ScheduleGPipe), ("1f1b", Schedule1F1B)):
        for m in micro:
            module = stage_layers(rank, p)
            try:
                stage = PipelineStage(module, rank, p, torch.device("cpu"), input_args=(torch.empty(ROWS, WIDTH),))
                schedule = cls(stage, n_microbatches=m, loss_fn=torch.nn.functional.mse_loss)
            except Exception as e:  # e.g. a schedule that refuses m < p
                if rank == 0:
                    results.append({"schedule": name, "micro_batches": m, "error": str(e).splitlines()[0]})
                continue
            opt = torch.optim.SGD(module.parameters(), lr=0.001)
            g = torch.Generator().manual_seed(1)
            x = torch.randn(m * ROWS, WIDTH, generator=g)
            y = torch.randn(m * ROWS, WIDTH, generator=g)
            times = []
            for s in range(steps + 1):
                t0 = time.perf_counter()
                opt.zero_grad()
                if rank == 0:
                    schedule.step(x)
                elif rank == p - 1:
                    schedule.step(target=y, losses=[])
                else:
                    schedule.step()
                opt.step()
                if s:
                    times.append((time.perf_counter() - t0) * 1e3)
            dist.barrier()
            if rank == 0:
                results.append({"schedule": name, "micro_batches": m, "step_ms": statistics.median(times)})
    if rank == 0:
        queue.put(results)
    dist.destroy_process_group()


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--stages", type=int, default=2)
    a.add_argument("--steps", type=int, default=10)
    a.add_argument("--micro", default="1,2,4,8,16")
    args = a.parse_args()
    micro = [int(v) for v in args.micro.split(",")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(worker, args=(args.stages, port, args.steps, micro, queue), nprocs=args.stages)
    print(json.dumps({"benchmark": "pytorch_pipeline", "torch": torch.__version__, "stages": args.stages,
                      "results": queue.get()}))


if __name__ == "__main__":
    main()
