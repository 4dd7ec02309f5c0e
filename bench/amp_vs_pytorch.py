#!/usr/bin/env python3
"""Kiln's autocast against PyTorch's on the same device, side by side in one run: f32, bf16
and f16 training step time and peak memory for the MLP, the CNN and the matmul-bound wide MLP
(bench/amp_bench.cc and bench/pytorch_amp.py). On a GPU the target is >= 1.8x over f32 (non-TF32)
where matmuls dominate, with lower peak memory. Ends with one JSON line. Refuses to run on a
loaded machine unless --allow-load (bench/host_check.py), which amp_bench also gets."""
import argparse
import json
import os
import subprocess
import sys

from host_check import HostCheck, add_allow_load
from vs_pytorch import torch_python


def last_json(cmd):
    print("+ " + " ".join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads([l for l in out.stdout.splitlines() if l.startswith("{")][-1])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--amp-bench", required=True)
    p.add_argument("--pytorch-script", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--models", default="mlp,cnn,wide_mlp")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--blocks", type=int, default=3)
    add_allow_load(p)
    a = p.parse_args()
    py, label = torch_python()
    host = HostCheck("amp_vs_pytorch", a.allow_load)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(a.pytorch_script))
    kiln_line = last_json([a.amp_bench, "--device", a.device, "--models", a.models, "--steps", str(a.steps),
                           "--blocks", str(a.blocks)] + host.child_flags())
    kiln = kiln_line["results"]
    rows = []
    for k in kiln:
        cmd = [py, a.pytorch_script, "--device", a.device, "--model", k["model"], "--precision", k["precision"],
               "--steps", str(a.steps), "--blocks", str(a.blocks)]
        print("+ " + " ".join(cmd), file=sys.stderr)
        out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True, env=env)
        t = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append({"model": k["model"], "precision": k["precision"], "kiln_step_ms": k["step_ms"],
                     "kiln_peak_mib": k["peak_mib"], "pytorch_step_ms": t["step_ms"], "pytorch_peak_mib": t["peak_mib"]})
    base = {(r["model"]): r for r in rows if r["precision"] == "f32"}
    print(f"\nKiln vs {label} autocast on {a.device}")
    print(f"{'model':9} {'prec':5} {'kiln ms':>8} {'x f32':>6} {'kiln MiB':>9} {'torch ms':>9} {'x f32':>6} "
          f"{'torch MiB':>10} {'torch/kiln':>10}")
    for r in rows:
        b = base[r["model"]]
        print(f"{r['model']:9} {r['precision']:5} {r['kiln_step_ms']:8.2f} {b['kiln_step_ms'] / r['kiln_step_ms']:6.2f} "
              f"{r['kiln_peak_mib']:9.1f} {r['pytorch_step_ms']:9.2f} {b['pytorch_step_ms'] / r['pytorch_step_ms']:6.2f} "
              f"{r['pytorch_peak_mib']:10.1f} {r['pytorch_step_ms'] / r['kiln_step_ms']:10.2f}")
    print(json.dumps(host.finish({"benchmark": "amp_vs_pytorch", "device": a.device, "baseline": label,
                                  "results": rows}, children=[kiln_line])))


if __name__ == "__main__":
    main()
