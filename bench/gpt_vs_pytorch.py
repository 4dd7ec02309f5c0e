#!/usr/bin/env python3
"""Kiln's GPT trainer (examples/gpt) against the same GPT in PyTorch (bench/gpt_pytorch.py), eager
and torch.compile, on this machine: same model, byte vocabulary, batch, sequence length, data,
schedule and thread count. Runs are interleaved (kiln, eager, compile, kiln, ...); medians of
training tokens/s (the first step excluded), tokens per CPU-second of the process (all its threads:
steadier than wall time when other jobs share the cores, though it also counts threads that spin
while waiting), peak RSS and MFU are printed with Kiln's ratios, then one JSON line. MFU is the
model's training FLOPs per second over this machine's measured GEMM peak at the same thread count:
the faster of torch.matmul on 2048 x 2048 f32 matrices (best of 5, measured before the runs) and
Kiln's own matmul (1024^3, best of 8, which each Kiln run measures at its start: the median).

  --quality-steps N    instead: one d6 run of N steps per framework (Kiln, PyTorch eager) with the
                       validation loss every --eval-every steps, both curves written as an SVG
                       (--svg) and the final bits per byte printed.

Refuses to run on a loaded machine unless --allow-load (bench/host_check.py)."""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_check import HostCheck, add_allow_load  # noqa: E402
from vs_pytorch import torch_python  # noqa: E402  (the PyPI venv, set up on first use)


def last_json(cmd, env=None):
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"gpt_vs_pytorch: {cmd[0]} exited with {out.returncode}")
    line = [l for l in out.stdout.splitlines() if l.startswith("{")][-1]
    r = json.loads(line)
    print(f"  -> {r['tokens_per_sec']:.0f} tok/s, {r['tokens_per_cpu_sec']:.0f} tok/CPU-s, "
          f"{r['peak_rss_mb']:.0f} MB, val loss {r['val_loss']:.4f}", file=sys.stderr, flush=True)
    return r


def svg(curves, path, title):
    """Validation bits per byte against step, one polyline per framework, drawn by hand."""
    w, h, m = 640, 400, 60
    pts = [(s, v / 0.6931471805599453) for c in curves.values() for s, v in c]
    x1, y0, y1 = max(p[0] for p in pts), min(p[1] for p in pts), max(p[1] for p in pts)
    y0, y1 = y0 - 0.05 * (y1 - y0), y1 + 0.05 * (y1 - y0)
    sx = lambda s: m + (w - 2 * m) * s / x1
    sy = lambda v: h - m - (h - 2 * m) * (v - y0) / (y1 - y0)
    colors = ["#d62728", "#1f77b4", "#2ca02c"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="black"/>',
           f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - 15}" text-anchor="middle">step</text>',
           f'<text x="15" y="{h / 2}" transform="rotate(-90 15 {h / 2})" text-anchor="middle">validation bits per byte</text>']
    for i in range(6):
        v, s = y0 + (y1 - y0) * i / 5, x1 * i / 5
        out.append(f'<text x="{m - 5}" y="{sy(v) + 4:.1f}" text-anchor="end">{v:.2f}</text>')
        out.append(f'<text x="{sx(s):.1f}" y="{h - m + 16}" text-anchor="middle">{s:.0f}</text>')
    for k, (name, c) in enumerate(curves.items()):
        line = " ".join(f"{sx(s):.1f},{sy(v / 0.6931471805599453):.1f}" for s, v in c)
        out.append(f'<polyline points="{line}" fill="none" stroke="{colors[k]}" stroke-width="2"/>')
        out.append(f'<text x="{w - m - 150}" y="{m + 18 * k}" fill="{colors[k]}">{name}</text>')
    out.append("</svg>")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(out) + "\n")
    os.replace(tmp, path)


PEAK_SCRIPT = """
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
best = float("inf")
for i in range(7):
    t = time.perf_counter(); torch.matmul(a, b); dt = time.perf_counter() - t
    if i >= 2: best = min(best, dt)
print(2 * 2048 ** 3 / best / 1e9)
"""


def gemm_peak_gflops(py, threads):
    """The machine's measured f32 GEMM peak at `threads` threads (GFLOP/s)."""
    out = subprocess.run([py, "-c", PEAK_SCRIPT, str(threads)], stdout=subprocess.PIPE, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kiln-bin", required=True)
    p.add_argument("--pytorch-script", required=True)
    p.add_argument("--models", default="d6,d12")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--steps", type=int, default=8, help="optimizer steps per timed run")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    p.add_argument("--data", default="/usr/share/games/fortunes")
    p.add_argument("--quality-steps", type=int, default=0)
    p.add_argument("--eval-every", type=int, default=25)
    p.add_argument("--svg", default="gpt_quality.svg")
    add_allow_load(p)
    a = p.parse_args()
    py, label = torch_python()
    host = HostCheck("gpt_vs_pytorch", a.allow_load)
    # Under `bazel run` a relative --svg means the directory the command was given in.
    a.svg = os.path.join(os.environ.get("BUILD_WORKING_DIRECTORY", ""), a.svg)
    common = ["--batch-size", str(a.batch_size), "--seq-len", str(a.seq_len), "--threads", str(a.threads),
              "--data", a.data, "--seed", "1337"]

    if a.quality_steps:
        q = common + ["--model", "d6", "--max-steps", str(a.quality_steps), "--eval-every", str(a.eval_every),
                      "--warmup-steps", str(max(1, a.quality_steps // 10)), "--eval-batches", "16"]
        kiln = last_json([a.kiln_bin] + q + ["--log-every", "25", "--sample-tokens", "300"])
        torch_run = last_json([py, a.pytorch_script] + q + ["--log-every", "25"])
        curves = {"Kiln": kiln["val_curve"], f"PyTorch eager ({label})": torch_run["val_curve"]}
        svg(curves, a.svg, f"GPT d6 on fortunes, batch {a.batch_size} x {a.seq_len} bytes, {a.threads} threads")
        for name, r in (("kiln", kiln), ("pytorch", torch_run)):
            print(f"{name:8s} final val loss {r['val_loss']:.4f} = {r['val_bpb']:.4f} bits per byte, "
                  f"{r['tokens_per_sec']:.0f} tok/s")
        print(json.dumps(host.finish({"quality_steps": a.quality_steps, "kiln_val_bpb": kiln["val_bpb"],
                                      "pytorch_val_bpb": torch_run["val_bpb"], "kiln_curve": kiln["val_curve"],
                                      "pytorch_curve": torch_run["val_curve"], "svg": a.svg})))
        return

    torch_peak = gemm_peak_gflops(py, a.threads)
    print(f"torch.matmul 2048^3 f32, {a.threads} threads: {torch_peak:.1f} GFLOP/s", flush=True)
    timed = common + ["--max-steps", str(a.steps), "--eval-every", "0", "--eval-batches", "1",
                      "--warmup-steps", "2", "--log-every", str(a.steps)]
    rows = []
    for model in a.models.split(","):
        runs = {"kiln": [], "eager": [], "compile": []}
        for _ in range(a.repeats):
            runs["kiln"].append(last_json([a.kiln_bin, "--model", model, "--sample-tokens", "0"] + timed))
            runs["eager"].append(last_json([py, a.pytorch_script, "--model", model] + timed))
            if not a.no_compile:
                runs["compile"].append(last_json([py, a.pytorch_script, "--model", model, "--compile"] + timed))
        def med(k, key):
            return statistics.median(r[key] for r in runs[k])
        kiln_peak = med("kiln", "peak_gflops")
        peak = max(torch_peak, kiln_peak)
        # Training FLOPs per token (Kiln's count, the same model for all three) from Kiln's MFU.
        flops_per_token = med("kiln", "mfu") * kiln_peak * 1e9 / med("kiln", "tokens_per_sec")
        row = {"model": model, "batch": a.batch_size, "seq_len": a.seq_len, "threads": a.threads,
               "gemm_peak_gflops": peak, "torch_gemm_gflops": torch_peak, "kiln_gemm_gflops": kiln_peak}
        for k in (k for k, v in runs.items() if v):
            row[f"{k}_tok_s"], row[f"{k}_tok_cpu_s"] = med(k, "tokens_per_sec"), med(k, "tokens_per_cpu_sec")
            row[f"{k}_rss_mb"] = med(k, "peak_rss_mb")
            row[f"{k}_mfu"] = flops_per_token * row[f"{k}_tok_s"] / (peak * 1e9)
            if k != "kiln":
                row[f"kiln_vs_{k}"] = row["kiln_tok_s"] / row[f"{k}_tok_s"]
                row[f"kiln_vs_{k}_cpu"] = row["kiln_tok_cpu_s"] / row[f"{k}_tok_cpu_s"]
        rows.append(row)
        print(f"{model} GEMM peak {peak:.1f} GFLOP/s (torch.matmul {torch_peak:.1f}, Kiln's matmul {kiln_peak:.1f})")
        for k in (k for k, v in runs.items() if v):
            ratio = "" if k == "kiln" else f"  kiln x{row[f'kiln_vs_{k}']:.2f} (per CPU-second x{row[f'kiln_vs_{k}_cpu']:.2f})"
            print(f"{model} {k:8s} {row[f'{k}_tok_s']:8.0f} tok/s {row[f'{k}_tok_cpu_s']:8.0f} tok/CPU-s "
                  f"{row[f'{k}_rss_mb']:6.0f} MB peak RSS  MFU {100 * row[f'{k}_mfu']:4.1f} %{ratio}", flush=True)
    print(json.dumps(host.finish({"pytorch": label, "repeats": a.repeats, "rows": rows})))


if __name__ == "__main__":
    main()
