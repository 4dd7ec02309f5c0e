#!/usr/bin/env python3
"""PyTorch's side of bench/sharded_vs_pytorch.py: the GPT of bench/gpt_pytorch.py (pre-LN, causal
SDPA, tanh GELU, tied head, byte vocabulary) trained for a few steps on N ranks of Gloo on the CPU,
one thread each, as DDP (DistributedDataParallel), FSDP2 (torch.distributed.fsdp.fully_shard on
every block, then the root) or tensor parallel (torch.distributed.tensor.parallel.parallelize_module
over a 1-D device mesh: q, k, v and c_fc column-wise, the two projections row-wise, Megatron's
split; embeddings, norms and the tied head replicated). q, k and v are separate Linear layers in
every mode (a fused one cannot be split by heads column-wise). AdamW, random token batches.
Prints one JSON line: the median step time of rank 0 over --steps steps after one warm-up, or the
error a mode raised (for instance a collective Gloo lacks)."""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_pytorch import GPT, SHAPES  # noqa: E402


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.q, self.k, self.v = nn.Linear(c, c), nn.Linear(c, c), nn.Linear(c, c)
        self.attn_proj = nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, _ = x.shape
        a = self.ln_1(x)
        # -1 heads: under tensor parallelism each rank holds h / T of them.
        q, k, v = (m(a).view(b, t, -1, a.shape[-1] // self.h).transpose(1, 2) for m in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, -1)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


def wrap(model, mode, world):
    if mode == "ddp":
        return nn.parallel.DistributedDataParallel(model)
    if mode == "fsdp":
        from torch.distributed.fsdp import fully_shard
        for blk in model.h:
            fully_shard(blk)
        fully_shard(model)
        return model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    mesh = init_device_mesh("cpu", (world,))
    plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(), "attn_proj": RowwiseParallel(),
            "c_fc": ColwiseParallel(), "mlp_proj": RowwiseParallel()}
    for blk in model.h:
        parallelize_module(blk, mesh, plan)
    return model


def rank_main(rank, a, port, out_path):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", rank=rank, world_size=a.nproc)
    result = {"mode": a.mode, "ranks": a.nproc}
    try:
        layers, heads, width, block = SHAPES[a.model]
        torch.manual_seed(a.seed)  # the same weights on every rank (TP and FSDP shard them)
        model = wrap(GPT(layers, heads, width, block, 256, block_class=Block), a.mode, a.nproc)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
        # Data-parallel ranks read different rows; tensor-parallel peers the same ones.
        g = torch.Generator().manual_seed(a.seed + (0 if a.mode == "tp" else rank))
        times = []
        for step in range(a.steps + 1):
            x = torch.randint(0, 256, (a.batch_size, a.seq_len), generator=g)
            y = torch.randint(0, 256, (a.batch_size, a.seq_len), generator=g)
            dist.barrier()
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            model(x, y).backward()
            opt.step()
            if step > 0:
                times.append((time.perf_counter() - t0) * 1e3)
        result["step_ms"] = statistics.median(times)
    except Exception as e:  # noqa: BLE001  (the mode's failure is the figure)
        result["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:400]
        if a.verbose:
            traceback.print_exc()
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump(result, f)
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["ddp", "fsdp", "tp"], required=True)
    p.add_argument("--model", default="d6", choices=sorted(SHAPES))
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args()
    import socket
    import tempfile
    port = a.port
    if port == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result.json")
        mp.start_processes(rank_main, args=(a, port, out), nprocs=a.nproc, start_method="spawn")
        with open(out) as f:
            result = json.load(f)
    result.update(benchmark="pytorch_sharded", model=a.model, batch_size=a.batch_size, seq_len=a.seq_len,
                  steps=a.steps, torch=torch.__version__)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
