#!/usr/bin/env python3
"""Kiln's CPU attention (bench/attention_bench: fused and composite) beside PyTorch's
torch.nn.functional.scaled_dot_product_attention on the CPU, in one run on this machine: f32,
causal, B=4 H=12 D=64, the same sequence lengths, the same thread count, the same timing (best of
--reps forward and forward+backward runs after a warm-up). PyTorch is PyTorch 2.x from PyPI in
the venv vs_pytorch.py sets up ($KILN_TORCH_VENV, default ~/.cache/kiln/torch-venv), or
$KILN_TORCH_PYTHON. Prints a side-by-side table with ratios and one JSON line. Refuses to run on a
loaded machine unless --allow-load (bench/host_check.py), which attention_bench also gets.
  attention_vs_pytorch.py --attention-bench PATH [--seqs 256,1024] [--reps 5] [--threads N] [--allow-load]"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_check import HostCheck, add_allow_load  # noqa: E402
from vs_pytorch import torch_python  # noqa: E402

TORCH_SCRIPT = r"""
import json, sys, time, torch
import torch.nn.functional as F
seqs, reps, threads = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
torch.manual_seed(0)
B, H, D = 4, 12, 64
rows = []
for T in seqs:
    q, k, v = (torch.randn(B, H, T, D, requires_grad=True) for _ in range(3))
    g = torch.randn(B, H, T, D)
    def step():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(g)
        q.grad = k.grad = v.grad = None
    step()
    fwd = st = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
        fwd = min(fwd, time.perf_counter() - t0)
        t0 = time.perf_counter()
        step()
        st = min(st, time.perf_counter() - t0)
    rows.append({"T": T, "fwd_ms": fwd * 1e3, "step_ms": st * 1e3})
print(json.dumps({"version": torch.__version__, "threads": torch.get_num_threads(), "rows": rows}))
"""


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--attention-bench", required=True)
    p.add_argument("--seqs", default="256,1024")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    add_allow_load(p)
    a = p.parse_args()
    py, label = torch_python()
    host = HostCheck("attention_vs_pytorch", a.allow_load)
    # stderr passes through: a refusal of attention_bench's own host check says why.
    kiln_out = subprocess.run([a.attention_bench, "--seqs", a.seqs, "--reps", str(a.reps), "--threads",
                               str(a.threads)] + host.child_flags(), stdout=subprocess.PIPE, text=True,
                              check=True).stdout
    kiln = json.loads(kiln_out.strip().splitlines()[-1])
    seqs = [int(s) for s in a.seqs.split(",")]
    torch_out = subprocess.run([py, "-c", TORCH_SCRIPT, json.dumps(seqs), str(a.reps), str(a.threads)],
                               capture_output=True, text=True, check=True).stdout
    torch = json.loads(torch_out.strip().splitlines()[-1])
    print(f"attention, f32, causal, B=4 H=12 D=64, {a.threads} threads, best of {a.reps}; PyTorch: {label}")
    print(f"{'T':>6} {'':>22} {'Kiln fused':>11} {'Kiln comp.':>11} {'PyTorch':>11} {'PyTorch/fused':>14}")
    rows = []
    for kr, tr in zip(kiln["rows"], torch["rows"]):
        for what, kf, kc, tt in (("forward ms", kr["fused_fwd_ms"], kr["composite_fwd_ms"], tr["fwd_ms"]),
                                 ("forward+backward ms", kr["fused_step_ms"], kr["composite_step_ms"],
                                  tr["step_ms"])):
            print(f"{kr['T']:>6} {what:>22} {kf:>11.2f} {kc:>11.2f} {tt:>11.2f} {tt / kf:>13.2f}x")
        print(f"{kr['T']:>6} {'peak MiB (Kiln)':>22} {kr['fused_peak_mib']:>11.1f} {kr['composite_peak_mib']:>11.1f}")
        if kiln.get("gemm_peak_gflops", 0) > 0:
            print(f"{kr['T']:>6} {'fused f+b GFLOP/s':>22} {kr['fused_step_gflops']:>11.1f}"
                  f"   ({100 * kr['fused_step_gflops'] / kiln['gemm_peak_gflops']:.0f} % of Kiln's GEMM peak,"
                  f" {kiln['gemm_peak_gflops']:.1f} GFLOP/s)")
        rows.append({**kr, "torch_fwd_ms": tr["fwd_ms"], "torch_step_ms": tr["step_ms"]})
    print(json.dumps(host.finish({"bench": "attention_vs_pytorch", "torch": label, "threads": a.threads,
                                  "rows": rows}, children=[kiln])))


if __name__ == "__main__":
    main()
