#!/usr/bin/env python3
"""The PyTorch twin of examples/gpt (bench/gpt_vs_pytorch.py and bench/gpt_gpu_vs_pytorch.py run
both): the same GPT-2 (pre-LN, fused qkv, causal SDPA, tanh GELU, tied head, GPT-2 init), the same
corpus split, the same batch positions (splitmix64 of seed and row), AdamW without decay on
biases/norms/embeddings, the same warm-up + cosine schedule, clipping at 1.0 and accumulation.
Eager or torch.compile, on the CPU or a GPU (--device cuda, with --amp bf16 autocast and
--fused-adamw). --write-hf-init DIR writes the initial weights in Hugging Face's GPT-2 layout
(config.json, model.safetensors) and exits; --init-from-hf DIR starts from such a directory, as
Kiln's --init-from-hf does (its shape, GPT-2's single-byte token ids), so both start from the same
weights. Ends with one JSON line like Kiln's (tokens_per_sec, step_ms, step_losses, peak_rss_mb,
peak_device_mb, val_loss, ...)."""
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
    # block_class: the block's module (bench/pytorch_sharded.py passes one with q, k and v apart).
    def __init__(self, layers, heads, width, block, vocab, block_class=None):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(block, width)
        self.h = nn.ModuleList((block_class or Block)(width, heads) for _ in range(layers))
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
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.h:
            x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


# Kiln's parameter names (Hugging Face's without "transformer.") for this module's own.
HF_NAMES = {"c_attn": "attn.c_attn", "attn_proj": "attn.c_proj", "c_fc": "mlp.c_fc", "mlp_proj": "mlp.c_proj"}
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def hf_name(name):
    """'h.3.c_fc.weight' -> 'transformer.h.3.mlp.c_fc.weight' (Hugging Face's GPT-2 names)."""
    parts = name.split(".")
    if parts[0] == "h":
        parts[2] = HF_NAMES.get(parts[2], parts[2])
    return "transformer." + ".".join(parts)


def write_hf(model, shape, vocab, path):
    """config.json and model.safetensors as GPT2LMHeadModel.save_pretrained lays them out (Conv1D
    weights [in, out], the head tied), written to temporary names and renamed."""
    from safetensors.torch import save_file
    layers, heads, width, block = shape
    os.makedirs(path, exist_ok=True)
    tensors = {}
    for n, p in model.named_parameters():
        k = hf_name(n)
        tensors[k] = (p.t() if k.endswith(CONV1D) else p).detach().float().contiguous().cpu()
    config = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
              "n_layer": layers, "n_head": heads, "n_embd": width, "n_positions": block, "n_ctx": block,
              "vocab_size": vocab, "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    for name, write in (("model.safetensors", lambda f: save_file(tensors, f, metadata={"format": "pt"})),
                        ("config.json", lambda f: open(f, "w").write(json.dumps(config, indent=2) + "\n"))):
        tmp = os.path.join(path, name + ".tmp")
        write(tmp)
        os.replace(tmp, os.path.join(path, name))


def read_hf(path):
    """(shape, vocab, state dict of this module's names) from a directory write_hf wrote."""
    from safetensors.torch import load_file
    c = json.load(open(os.path.join(path, "config.json")))
    shape = (c["n_layer"], c["n_head"], c["n_embd"], c["n_positions"])
    hf = load_file(os.path.join(path, "model.safetensors"))
    inverse = {v: k for k, v in HF_NAMES.items()}
    state = {}
    for k, t in hf.items():
        if k == "lm_head.weight" or k.endswith((".attn.bias", ".attn.masked_bias")):
            continue
        parts = k.removeprefix("transformer.").split(".")
        if parts[0] == "h":
            inner = parts[2] + "." + parts[3]
            parts = parts[:2] + [inverse.get(inner, inner)] + parts[4:]
        state[".".join(parts)] = t.t() if k.endswith(CONV1D) else t
    return shape, c["vocab_size"], state


def gpt2_byte_ids():
    """GPT-2's token id of each single byte (bytes_to_unicode's order: printable bytes first)."""
    printable = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    order = printable + [b for b in range(256) if b not in set(printable)]
    ids = [0] * 256
    for i, b in enumerate(order):
        ids[b] = i
    return torch.tensor(ids, dtype=torch.int64)


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
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--amp", default="none", choices=["none", "bf16"], help="bf16 autocast")
    p.add_argument("--fused-adamw", action="store_true", help="torch.optim.AdamW(fused=True)")
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--init-from-hf", default="", help="start from this Hugging Face GPT-2 directory")
    p.add_argument("--write-hf-init", default="", help="write the initial weights to this directory and exit")
    p.add_argument("--peak-tflops", type=float, default=0, help="the device's peak, for MFU")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    shape, vocab = SHAPES[a.model], a.vocab_size
    if a.init_from_hf:
        shape, vocab, state = read_hf(a.init_from_hf)
    layers, heads, width, block = shape
    model = GPT(layers, heads, width, block, vocab)
    if a.write_hf_init:
        write_hf(model, shape, vocab, a.write_hf_init)
        print(json.dumps({"wrote": a.write_hf_init, "params": sum(p.numel() for p in model.parameters())}))
        return
    if a.init_from_hf:
        model.load_state_dict(state)
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    model.to(dev)
    t = a.seq_len or block
    train, val = split(read_corpus(a.data))
    if a.init_from_hf:  # Kiln's --init-from-hf feeds GPT-2's single-byte token ids
        ids = gpt2_byte_ids()
        train, val = ids[train], ids[val]
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and not n.startswith(("wte", "wpe"))]
    rest = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and not n.startswith(("wte", "wpe")))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8, fused=a.fused_adamw or None)
    autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.amp == "bf16")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    step_fn = torch.compile(model) if a.compile else model

    def evaluate():
        model.eval()
        with torch.no_grad():
            n = min(a.eval_batches, (len(val) - 1) // t // a.batch_size)
            losses = []
            for i in range(n):
                rows = torch.stack([val[(i * a.batch_size + r) * t:(i * a.batch_size + r) * t + t + 1]
                                    for r in range(a.batch_size)])
                with autocast:
                    losses.append(model(rows[:, :-1].to(dev), rows[:, 1:].to(dev)).item())
        model.train()
        return sum(losses) / len(losses)

    curve, timed, cpu, tokens, step_ms, step_losses = [], 0.0, 0.0, 0, [], []
    start = time.time()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for step in range(a.max_steps):
        t0, c0 = time.perf_counter(), time.process_time()
        x, y = random_batch(train, a.batch_size, t, a.seed, step * a.batch_size)
        with autocast:
            loss = step_fn(x.to(dev), y.to(dev))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for g in opt.param_groups:
            g["lr"] = lr_at(a, step)
        opt.step()
        step_losses.append(loss.item())
        sync()
        dt = time.perf_counter() - t0
        step_ms.append(dt * 1e3)
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
                      "peak_device_mb": torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0,
                      "n_layer": layers, "n_head": heads, "n_embd": width, "block_size": block,
                      "device": str(dev), "amp": a.amp, "fused_adamw": a.fused_adamw, "vocab_size": vocab,
                      "params": sum(p.numel() for p in model.parameters()),
                      "step_ms": step_ms, "step_losses": step_losses,
                      "wall_seconds": time.time() - start}))


if __name__ == "__main__":
    main()
