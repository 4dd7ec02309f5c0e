#!/usr/bin/env python3
"""Kiln's sharded GPT steps beside PyTorch's on the same machine: FSDP (Kiln `gpt --fsdp`, PyTorch
fully_shard) and tensor parallel (Kiln `gpt --tp N`, PyTorch parallelize_module) beside DDP (Kiln
`gpt --ddp`, PyTorch DistributedDataParallel), each on --nproc ranks of Gloo on 127.0.0.1, one
thread per rank, same GPT shape (byte vocabulary), batch per rank and sequence length; Kiln
through its launcher (//distributed/launch), PyTorch through bench/pytorch_sharded.py. Rounds are
interleaved (Kiln ddp, PyTorch ddp, Kiln fsdp, ... then again); each figure is the median over
the rounds of each run's median step (the first step excluded), and the speed-up the median of
the rounds' PyTorch / Kiln ratios with their range. Also Kiln's FSDP and TP over its own DDP.
A mode PyTorch cannot run is reported with its error. Ends with one JSON line. Refuses to run on
a loaded machine unless --allow-load (bench/host_check.py)."""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_check import HostCheck, add_allow_load  # noqa: E402
from vs_pytorch import last_json, torch_python  # noqa: E402

KILN_FLAGS = {"ddp": ["--ddp"], "fsdp": ["--fsdp"], "tp": None}  # tp: --tp N (set below)


def kiln_step_ms(a, mode):
    flags = KILN_FLAGS[mode] if mode != "tp" else ["--tp", str(a.nproc)]
    cmd = [a.launch, "--nproc-per-node", str(a.nproc), "--", a.kiln_gpt, *flags, "--model", a.model,
           "--batch-size", str(a.batch_size), "--seq-len", str(a.seq_len), "--max-steps", str(a.steps + 1),
           "--warmup-steps", "1", "--eval-batches", "1", "--log-every", "1000", "--sample-tokens", "0",
           "--threads", "1"]
    line = last_json(cmd)
    return statistics.median(line["step_ms"][1:])


def torch_step(a, py, mode):
    cmd = [py, a.pytorch_script, "--mode", mode, "--model", a.model, "--nproc", str(a.nproc), "--batch-size",
           str(a.batch_size), "--seq-len", str(a.seq_len), "--steps", str(a.steps), "--threads", "1"]
    line = last_json(cmd)
    return line.get("step_ms"), line.get("error")


def summarize(modes, kiln, torch, errors):
    """Rows per mode from the rounds: kiln[mode] and torch[mode] are lists of step ms (None: failed)."""
    rows = []
    for mode in modes:
        k = kiln[mode]
        t = [x for x in torch[mode] if x]
        ratios = [tt / kk for kk, tt in zip(k, torch[mode]) if tt]
        vs_ddp = [kk / d for kk, d in zip(k, kiln["ddp"])] if "ddp" in kiln and mode != "ddp" else []
        rows.append({"mode": mode, "kiln_step_ms": statistics.median(k), "pytorch_step_ms": statistics.median(t) if t else None,
                     "speedup": statistics.median(ratios) if ratios else None,
                     "speedup_min": min(ratios) if ratios else None, "speedup_max": max(ratios) if ratios else None,
                     "kiln_vs_kiln_ddp": statistics.median(vs_ddp) if vs_ddp else None,
                     "kiln_rounds": k, "pytorch_rounds": torch[mode], "pytorch_error": errors.get(mode)})
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kiln-gpt", required=True)
    p.add_argument("--launch", required=True)
    p.add_argument("--pytorch-script", required=True)
    p.add_argument("--model", default="d6", choices=["d6", "d12", "d24"])
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=10, help="timed steps per run (after one warm-up step)")
    p.add_argument("--modes", default="ddp,fsdp,tp")
    p.add_argument("--rounds", type=int, default=3, help="Kiln and PyTorch alternately, this many times each")
    add_allow_load(p)
    a = p.parse_args()
    modes = a.modes.split(",")
    bad = [m for m in modes if m not in KILN_FLAGS]
    if bad or a.rounds < 1 or a.steps < 1 or a.nproc < 2:
        p.error(f"--modes {a.modes} (of ddp, fsdp, tp), --rounds {a.rounds}, --steps {a.steps} (>= 1), "
                f"--nproc {a.nproc} (>= 2)")
    py, label = torch_python()
    host = HostCheck("sharded_vs_pytorch", a.allow_load)
    kiln = {m: [] for m in modes}
    torch = {m: [] for m in modes}
    errors = {}
    for _ in range(a.rounds):
        for mode in modes:
            kiln[mode].append(kiln_step_ms(a, mode))
            ms, err = torch_step(a, py, mode)
            torch[mode].append(ms)
            if err:
                errors[mode] = err
    rows = summarize(modes, kiln, torch, errors)
    print(f"\nKiln vs {label}: GPT {a.model}, {a.nproc} ranks x 1 thread, Gloo on 127.0.0.1, batch {a.batch_size} x "
          f"{a.seq_len} tokens per rank, median step of {a.steps} steps, median of {a.rounds} interleaved rounds")
    print(f"{'mode':6} {'kiln ms':>9} {'torch ms':>9} {'speedup':>8} {'range':>13} {'kiln / kiln ddp':>16}")
    for r in rows:
        t = f"{r['pytorch_step_ms']:9.1f}" if r["pytorch_step_ms"] else "      n/a"
        s = f"{r['speedup']:7.2f}x" if r["speedup"] else "     n/a"
        rng = f"[{r['speedup_min']:.2f}-{r['speedup_max']:.2f}]" if r["speedup"] else ""
        own = f"{r['kiln_vs_kiln_ddp']:.2f}x" if r["kiln_vs_kiln_ddp"] else "-"
        print(f"{r['mode']:6} {r['kiln_step_ms']:9.1f} {t} {s} {rng:>13} {own:>16}"
              + (f"  (PyTorch: {r['pytorch_error']})" if r["pytorch_error"] else ""))
    print("speedup: PyTorch's step / Kiln's (above 1: Kiln faster); kiln / kiln ddp: Kiln's step over its own DDP step "
          f"(a TP step trains one batch over its {a.nproc} ranks, a DDP or FSDP step {a.nproc} batches)")
    print(json.dumps(host.finish({"benchmark": "sharded_vs_pytorch", "baseline": label, "model": a.model,
                                  "ranks": a.nproc, "batch_size": a.batch_size, "seq_len": a.seq_len,
                                  "steps": a.steps, "rounds": a.rounds, "results": rows})))


if __name__ == "__main__":
    main()
