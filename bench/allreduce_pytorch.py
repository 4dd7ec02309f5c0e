"""torch.distributed's all-reduce bus bandwidth, timed as //bench:allreduce_bench times Kiln's
(f32 sum, sizes 4 B .. --max-bytes by 4x, ~0.3 s per size, busbw = algbw x 2(n-1)/n), so the two
tables sit side by side. With --op reduce_scatter or allgather, those collectives as the bench runs
them (the buffer a multiple of the ranks; reduce-scatter into this rank's chunk of it, all-gather
from a chunk into it; busbw = algbw x (n-1)/n). Run one process per rank with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set
(as for Kiln's bench); NCCL on cuda:LOCAL_RANK, or gloo with --backend gloo. Rank 0 prints the
table; the last line is JSON."""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    p.add_argument("--max-bytes", type=int, default=64 << 20)
    p.add_argument("--op", default="allreduce", choices=["allreduce", "reduce_scatter", "allgather"])
    a = p.parse_args()
    dev = torch.device("cpu")
    if a.backend == "nccl":
        dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(dev)
    dist.init_process_group(a.backend)
    n, rank = dist.get_world_size(), dist.get_rank()

    def settle():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    if rank == 0:
        print(f"torch.distributed {a.backend} {a.op} (f32, sum where it reduces), {n} ranks")
        print(f"{'bytes':>12} {'time us':>10} {'algbw GB/s':>12} {'busbw GB/s':>12}")
    results = []
    nbytes = 4
    while nbytes <= a.max_bytes:
        chunk = max(1, (nbytes // 4 + n - 1) // n)
        elems = nbytes // 4 if a.op == "allreduce" else chunk * n
        t, mine = torch.ones(elems, device=dev), torch.ones(chunk, device=dev)

        def issue():
            if a.op == "reduce_scatter":
                dist.reduce_scatter_tensor(t.narrow(0, rank * chunk, chunk), t)
            elif a.op == "allgather":
                dist.all_gather_into_tensor(t, mine)
            else:
                dist.all_reduce(t)

        issue()
        settle()
        t0 = time.perf_counter()
        for _ in range(3):
            issue()
        settle()
        iters = torch.tensor([min(max(0.3 / max((time.perf_counter() - t0) / 3, 1e-6), 5.0), 2000.0)], device=dev)
        dist.broadcast(iters, 0)
        k = int(iters.item())
        dist.barrier()
        settle()
        t0 = time.perf_counter()
        for _ in range(k):
            issue()
        settle()
        per = (time.perf_counter() - t0) / k
        algbw = 4 * elems / per / 1e9
        busbw = algbw * (2 if a.op == "allreduce" else 1) * (n - 1) / n
        if rank == 0:
            print(f"{4 * elems:>12} {per * 1e6:>10.1f} {algbw:>12.3f} {busbw:>12.3f}")
            results.append({"bytes": 4 * elems, "us": per * 1e6, "algbw_gbs": algbw, "busbw_gbs": busbw})
        nbytes *= 4
    if rank == 0:
        print(json.dumps({"benchmark": "allreduce", "framework": "pytorch", "op": a.op, "backend": a.backend, "ranks": n,
                          "results": results}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
