#!/usr/bin/env python3
"""The PyTorch twin of examples/gpt (bench/gpt_vs_pytorch.py runs both): the same GPT-2 (pre-LN,
fused qkv, causal SDPA, tanh GELU, tied head, GPT-2 init), the same corpus split, the same batch
positions (splitmix64 of seed and row), AdamW without decay on biases/norms/embeddings, the same
warm-up + cosine schedule, clipping at 1.0 and accumulation. Eager or torch.compile. Ends with one
JSON line like Kiln's (tokens_per_sec, peak_rss_mb, val_loss, val_curve, ...)."""
import argparse
import json
import math
import os
import resource
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {"d6": (6, 6, 384, 256), "d12": (12, 12, 768, 1024), "d24": (24, 16, 1024, 1024)}
M64 = (1 << 64) - 1


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.attn_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (m.view(b, t, self.h, c // self.h).transpose(1, 2) for m in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, heads, width, block, vocab):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(block, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        for name, p in self.named_parameters():
            if "ln_" in name:
                continue
            if name.endswith("bias"):
                nn.init.zeros_(p)
            else:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.h:
            x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def read_corpus(path):
    if not os.path.isdir(path):
        return open(path, "rb").read()
    names = sorted(n for n in os.listdir(path) if not n.endswith(".dat"))
    files = [os.path.join(path, n) for n in names]
    return b"".join(open(f, "rb").read() for f in files if os.path.isfile(f) and not os.path.islink(f))


def split(text):
    seg = 10 * 1024
    train, val = bytearray(), bytearray()
    for i in range(0, len(text), seg):
        (val if (i // seg) % 10 == 9 else train).extend(text[i:i + seg])
    return torch.tensor(list(train), dtype=torch.int64), torch.tensor(list(val), dtype=torch.int64)


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def random_batch(tokens, b, t, seed, first_row):
    rng = len(tokens) - t
    starts = [splitmix64((seed * 0x9E3779B97F4A7C15 + first_row + r) & M64) % rng for r in range(b)]
    rows = torch.stack([tokens[s:s + t + 1] for s in starts])
    return rows[:, :-1], rows[:, 1:]


def lr_at(a, step):
    if step < a.warmup_steps:
        return a.lr * (step + 1) / a.warmup_steps
    if step >= a.max_steps:
        return a.min_lr
    p = (step - a.warmup_steps) / max(a.max_steps - a.warmup_steps, 1)
    return a.min_lr + 0.5 * (1 + math.cos(math.pi * p)) * (a.lr - a.min_lr)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="d6", choices=sorted(SHAPES))
    p.add_argument("--data", default="/usr/share/games/fortunes")
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--min-lr", type=float, default=1e-4)
    p.add_argument("--warmup-steps", type=int, default=20)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--eval-batches", type=int, default=8)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--compile", action="store_true")
    p.add_argument("--log-every", type=int, default=10)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    layers, heads, width, block = SHAPES[a.model]
    t = a.seq_len or block
    train, val = split(read_corpus(a.data))
    model = GPT(layers, heads, width, block, 256)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.startswith(("wte", "wpe"))]
    rest = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and not n.startswith(("wte", "wpe")))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    step_fn = torch.compile(model) if a.compile else model

    def evaluate():
        model.eval()
        with torch.no_grad():
            n = min(a.eval_batches, (len(val) - 1) // t // a.batch_size)
            losses = []
            for i in range(n):
                rows = torch.stack([val[(i * a.batch_size + r) * t:(i * a.batch_size + r) * t + t + 1]
                                    for r in range(a.batch_size)])
                losses.append(model(rows[:, :-1], rows[:, 1:]).item())
        model.train()
        return sum(losses) / len(losses)

    curve, timed, cpu, tokens = [], 0.0, 0.0, 0
    start = time.time()
    for step in range(a.max_steps):
        t0, c0 = time.perf_counter(), time.process_time()
        x, y = random_batch(train, a.batch_size, t, a.seed, step * a.batch_size)
        loss = step_fn(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for g in opt.param_groups:
            g["lr"] = lr_at(a, step)
        opt.step()
        dt = time.perf_counter() - t0
        if step > 0:
            timed, cpu, tokens = timed + dt, cpu + time.process_time() - c0, tokens + a.batch_size * t
        if (step + 1) % a.log_every == 0:
            print(f"step {step + 1}/{a.max_steps} | loss {loss.item():.4f} | {a.batch_size * t / dt:.0f} tok/s", flush=True)
        if (a.eval_every and (step + 1) % a.eval_every == 0) or step + 1 == a.max_steps:
            v = evaluate()
            curve.append([step + 1, v])
            print(f"step {step + 1} | val loss {v:.4f} | {v / math.log(2):.4f} bits per byte", flush=True)
    print(json.dumps({"framework": "pytorch-compile" if a.compile else "pytorch-eager", "torch": torch.__version__,
                      "model": a.model, "threads": a.threads, "batch_size": a.batch_size, "seq_len": t,
                      "steps": a.max_steps, "train_loss": loss.item(), "val_loss": curve[-1][1],
                      "val_bpb": curve[-1][1] / math.log(2), "val_curve": curve,
                      "tokens_per_sec": tokens / timed if timed else 0.0,
                      "tokens_per_cpu_sec": tokens / cpu if cpu else 0.0,
                      "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                      "wall_seconds": time.time() - start}))


if __name__ == "__main__":
    main()
