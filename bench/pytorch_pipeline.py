#!/usr/bin/env python3
"""PyTorch's torch.distributed.pipelining on the model, split and micro-batches of
//bench:pipeline_bench: an MLP of 16 layers (8 x Linear(512, 512) + Tanh) cut after the same
layers as Kiln's parameter-balanced split, 32 rows per micro-batch, MSE loss, SGD, Gloo on
127.0.0.1, one thread per rank, ScheduleGPipe, Schedule1F1B and (--virtual-stages v > 1, for m a
multiple of the stages, as Kiln runs it) ScheduleInterleaved1F1B with v chunks per rank. Rank 0
times zero_grad + step + optimizer step (as Kiln's bench does); the last line is JSON with the
same fields."""
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


def stage_layers(k, n):
    """Virtual stage k of n (with one chunk per rank, stage k of n)."""
    torch.manual_seed(0)
    layers = []
    for _ in range(8):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh()]
    # Kiln's balanced split ends each stage right after its last Linear.
    cuts = [0] + [2 * (8 // n) * k - 1 for k in range(1, n)] + [len(layers)]
    return torch.nn.Sequential(*layers[cuts[k]:cuts[k + 1]])


def worker(rank, p, port, steps, micro, chunks, queue):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=p)
    results = []
    runs = [("gpipe", ScheduleGPipe, 1), ("1f1b", Schedule1F1B, 1)]
    if chunks > 1:
        runs.append(("interleaved", ScheduleInterleaved1F1B, chunks))
    for name, cls, v in runs:
        for m in micro:
            if v > 1 and m % p:
                continue  # as Kiln's bench: interleaving takes the micro-batches p at a time
            # Rank r holds virtual stages r, r + p, ...: one module with every chunk's layers.
            chunks_here = [stage_layers(c * p + rank, p * v) for c in range(v)]
            module = torch.nn.ModuleList(chunks_here)
            try:
                stages = [PipelineStage(mod, c * p + rank, p * v, torch.device("cpu"),
                                        input_args=(torch.empty(ROWS, WIDTH),))
                          for c, mod in enumerate(chunks_here)]
                schedule = cls(stages if v > 1 else stages[0], n_microbatches=m,
                               loss_fn=torch.nn.functional.mse_loss)
            except Exception as e:  # e.g. a schedule that refuses m < p
                if rank == 0:
                    results.append({"schedule": name, "virtual_stages": v, "micro_batches": m,
                                    "error": str(e).splitlines()[0]})
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
                results.append({"schedule": name, "virtual_stages": v, "micro_batches": m,
                                "step_ms": statistics.median(times)})
    if rank == 0:
        queue.put(results)
    dist.destroy_process_group()


def main():
    a = argparse.ArgumentParser()
    a.add_argument("--stages", type=int, default=2)
    a.add_argument("--steps", type=int, default=10)
    a.add_argument("--micro", default="1,2,4,8,16")
    a.add_argument("--virtual-stages", type=int, default=2)
    args = a.parse_args()
    micro = [int(v) for v in args.micro.split(",")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(worker, args=(args.stages, port, args.steps, micro, args.virtual_stages, queue), nprocs=args.stages)
    print(json.dumps({"benchmark": "pytorch_pipeline", "torch": torch.__version__, "stages": args.stages,
                      "results": queue.get()}))


if __name__ == "__main__":
    main()
