#!/usr/bin/env python3
"""Kiln's f32 matmul (bench/gemm_shapes) beside torch.matmul at the shapes Kiln's models run: the
GPT's Linears (d6 and d12, batch 4 x 256 tokens) and the MNIST CNN's (its conv GEMMs and
Linears), each as its forward and both backward products on the same transposed views autograd
passes. The table comes from `gemm_shapes --list`, so both sides time the same products. The
two sides run as separate processes, interleaved --repeats times (Kiln, PyTorch, Kiln, ...) with
the same thread count; each figure is the median over the repeats of each run's median.
PyTorch is the venv's (bench/vs_pytorch.py) or $KILN_TORCH_PYTHON. Prints the table with
Kiln / torch.matmul per product and one JSON line. Refuses a loaded machine unless --allow-load.
  gemm_shapes.py --gemm-shapes PATH [--threads N] [--repeats 3] [--budget-s 0.5] [--allow-load]"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_check import HostCheck, add_allow_load  # noqa: E402
from vs_pytorch import torch_python  # noqa: E402

TORCH_SCRIPT = r"""
import json, statistics, sys, time, torch
shapes, threads, budget = json.loads(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
torch.set_num_threads(threads)
torch.manual_seed(0)
def operand(rows, cols, t):
    return torch.randn(cols, rows).t() if t else torch.randn(rows, cols)
out = {}
with torch.no_grad():
    for s in shapes:
        a, b = operand(s["m"], s["k"], s["a_t"]), operand(s["k"], s["n"], s["b_t"])
        torch.matmul(a, b)
        t0 = time.perf_counter(); torch.matmul(a, b); once = max(time.perf_counter() - t0, 1e-7)
        ts = []
        for _ in range(int(min(max(budget / once, 7), 2000))):
            t0 = time.perf_counter(); torch.matmul(a, b); ts.append(time.perf_counter() - t0)
        out[s["name"]] = 2.0 * s["m"] * s["k"] * s["n"] / statistics.median(ts) * 1e-9
print(json.dumps({"version": torch.__version__, "threads": torch.get_num_threads(), "gflops": out}))
"""


def ratio_table(shapes, kiln_runs, torch_runs):
    """Rows of (shape, kiln GFLOP/s, torch GFLOP/s, kiln/torch) from per-run {name: GFLOP/s}
    dicts, each figure the median over runs."""
    rows = []
    for s in shapes:
        k = statistics.median(r[s["name"]] for r in kiln_runs)
        t = statistics.median(r[s["name"]] for r in torch_runs)
        rows.append({**s, "kiln_gflops": k, "torch_gflops": t, "ratio": k / t})
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gemm-shapes", required=True, help="the bench/gemm_shapes binary")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--budget-s", type=float, default=0.5, help="seconds of timing per shape per run")
    add_allow_load(p)
    a = p.parse_args()
    py, label = torch_python()
    host = HostCheck("gemm_shapes", a.allow_load)
    shapes = json.loads(subprocess.run([a.gemm_shapes, "--list"], stdout=subprocess.PIPE, text=True,
                                       check=True).stdout)
    kiln_runs, torch_runs, children = [], [], []
    for _ in range(a.repeats):
        out = subprocess.run([a.gemm_shapes, "--threads", str(a.threads), "--budget-s", str(a.budget_s)] +
                             host.child_flags(), stdout=subprocess.PIPE, text=True, check=True).stdout
        kiln = json.loads(out.strip().splitlines()[-1])
        children.append(kiln)
        kiln_runs.append(kiln["gflops"])
        out = subprocess.run([py, "-c", TORCH_SCRIPT, json.dumps(shapes), str(a.threads), str(a.budget_s)],
                             capture_output=True, text=True, check=True).stdout
        torch_runs.append(json.loads(out.strip().splitlines()[-1])["gflops"])
    rows = ratio_table(shapes, kiln_runs, torch_runs)
    library = children[0].get("library") or "none"
    print(f"f32 GEMM at model shapes, {a.threads} threads, median of {a.repeats} interleaved runs; PyTorch: {label}; "
          f"Kiln: Eigen ({children[0].get('isa')}), products of >= 256 rows on the GEMM library: {library}")
    print(f"{'product':<18} {'M x K @ K x N':>20} {'Kiln':>8} {'torch':>8} {'Kiln/torch':>11}")
    for r in rows:
        dims = f"{r['m']}x{r['k']}{'T' if r['a_t'] else ''} @ {r['k']}x{r['n']}{'T' if r['b_t'] else ''}"
        print(f"{r['name']:<18} {dims:>20} {r['kiln_gflops']:>8.1f} {r['torch_gflops']:>8.1f} {r['ratio']:>10.2f}x")
    worst = min(rows, key=lambda r: r["ratio"])
    print(f"lowest: {worst['name']} at {worst['ratio']:.2f}x; {sum(r['ratio'] >= 0.95 for r in rows)} of {len(rows)} "
          f"products at >= 0.95x torch.matmul")
    print(json.dumps(host.finish({"bench": "gemm_shapes_vs_pytorch", "torch": label, "library": library, "threads": a.threads,
                                  "repeats": a.repeats, "rows": rows}, children=children)))


if __name__ == "__main__":
    main()
