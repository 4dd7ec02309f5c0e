#!/usr/bin/env python3
"""Kiln's GEMM TFLOP/s (bench/gemm_bench) against torch.matmul / F.linear on the same GPU in one
run: the same problems (square sizes and a 8192x4096x4096 linear with bias), the same modes
(f32, TF32 via torch.backends.cuda.matmul.allow_tf32, bf16, f16) and the same timing (median of 5
blocks between CUDA events after a warm-up). Prints a side-by-side table with Kiln/PyTorch, and
one JSON line. Refuses to run on a loaded machine unless --allow-load (bench/host_check.py), which
gemm_bench also gets.
  gemm_vs_pytorch.py --gemm-bench PATH [--sizes 1024,2048,4096,8192] [--allow-load]"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_check import HostCheck, add_allow_load  # noqa: E402


def torch_ms(torch, fn, iters):
    fn()
    torch.cuda.synchronize()
    blocks = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        blocks.append(start.elapsed_time(end) / iters)
    return statistics.median(blocks)


def torch_results(sizes):
    import torch
    import torch.nn.functional as F
    dtypes = {"f32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
    out = {}
    for mode, dt in dtypes.items():
        torch.backends.cuda.matmul.allow_tf32 = mode == "tf32"
        for n in sizes:
            a, b = torch.randn(n, n, device="cuda", dtype=dt), torch.randn(n, n, device="cuda", dtype=dt)
            iters = 5 if n >= 8192 else 20 if n >= 4096 else 50
            out[(mode, "matmul", n, n, n)] = torch_ms(torch, lambda: torch.matmul(a, b), iters)
        M, K, N = 8192, 4096, 4096
        x, w = torch.randn(M, K, device="cuda", dtype=dt), torch.randn(N, K, device="cuda", dtype=dt)
        bias = torch.randn(N, device="cuda", dtype=dt)
        out[(mode, "linear+bias", M, K, N)] = torch_ms(torch, lambda: F.linear(x, w, bias), 20)
    torch.backends.cuda.matmul.allow_tf32 = False
    return out, torch.__version__, torch.cuda.get_device_name(0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--gemm-bench", required=True)
    p.add_argument("--sizes", default="1024,2048,4096,8192")
    add_allow_load(p)
    a = p.parse_args()
    host = HostCheck("gemm_vs_pytorch", a.allow_load)
    # stderr passes through: a refusal of gemm_bench's own host check says why.
    run = subprocess.run([a.gemm_bench, "--sizes", a.sizes] + host.child_flags(), stdout=subprocess.PIPE, text=True,
                         check=True)
    kiln = json.loads(run.stdout.strip().splitlines()[-1])
    if "skipped" in kiln:
        print("skipped:", kiln["skipped"])
        return 0
    torch_ms_by_key, version, device = torch_results([int(s) for s in a.sizes.split(",")])
    print(f"device: {device}; PyTorch {version}")
    print(f"{'mode':6} {'problem (M x K x N)':26} {'Kiln TFLOP/s':>13} {'PyTorch':>9} {'Kiln/PyTorch':>13}")
    rows = []
    for r in kiln["results"]:
        key = (r["mode"], r["op"], r["M"], r["K"], r["N"])
        flops = 2.0 * r["M"] * r["K"] * r["N"]
        t = flops / torch_ms_by_key[key] / 1e9
        ratio = r["tflops"] / t
        print(f"{r['mode']:6} {r['op'] + ' ' + str(r['M']) + 'x' + str(r['K']) + 'x' + str(r['N']):26} "
              f"{r['tflops']:13.1f} {t:9.1f} {ratio:13.3f}")
        rows.append({**r, "torch_tflops": round(t, 2), "ratio": round(ratio, 3)})
    print(json.dumps(host.finish({"bench": "gemm_vs_pytorch", "device": device, "torch": version, "results": rows},
                                 children=[kiln])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
