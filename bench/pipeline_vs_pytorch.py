#!/usr/bin/env python3
"""Kiln's pipeline (//bench:pipeline_bench) against PyTorch's torch.distributed.pipelining
(bench/pytorch_pipeline.py) on the same model, split, micro-batches and machine, run one after
the other: step time per schedule and micro-batch count, the ratio, and Kiln's measured bubble
beside the ideal of equal stages, the model's (its stages' mean times replayed through the
schedule with free communication) and the replay's (every action's own time replayed so).
--rounds N runs Kiln, PyTorch, Kiln, ... N times each, so that the machine's drift over a run
falls on both; each figure is then the median over the rounds and the speed-up the median of the
rounds' ratios, printed with their range. PyTorch comes from the same environment as
vs_pytorch.py; ends with one JSON line. Refuses to run on a loaded machine unless --allow-load
(bench/host_check.py), which pipeline_bench also gets."""
import argparse
import json
import statistics

from host_check import HostCheck, add_allow_load
from vs_pytorch import last_json, torch_python


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kiln-bin", required=True)
    p.add_argument("--pytorch-script", required=True)
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--micro", default="1,2,4,8,16")
    p.add_argument("--virtual-stages", type=int, default=2, help="chunks per rank of the interleaved rows (1: none)")
    p.add_argument("--rounds", type=int, default=1, help="Kiln and PyTorch alternately, this many times each")
    add_allow_load(p)
    a = p.parse_args()
    if a.rounds < 1:
        p.error(f"--rounds: must be at least 1, got {a.rounds}")
    py, label = torch_python()
    host = HostCheck("pipeline_vs_pytorch", a.allow_load)
    common = ["--stages", str(a.stages), "--steps", str(a.steps), "--micro", a.micro,
              "--virtual-stages", str(a.virtual_stages)]
    kiln_runs, torch_runs, kiln_lines = [], [], []
    for _ in range(a.rounds):
        kiln_lines.append(last_json([a.kiln_bin] + common + host.child_flags()))
        kiln_runs.append(kiln_lines[-1]["results"])
        torch_runs.append({(r["schedule"], r["micro_batches"]): r
                           for r in last_json([py, a.pytorch_script] + common)["results"]})
    print(f"\nKiln vs {label} pipelining, {a.stages} stages x 1 thread, Gloo, median of {a.steps} steps"
          + (f", median of {a.rounds} alternating rounds (speed-up range in brackets)" if a.rounds > 1 else ""))
    print(f"{'sched':13} {'m':>3} {'kiln ms':>9} {'torch ms':>9} {'speedup':>8} {'kiln bubble':>12} {'ideal':>7} "
          f"{'model':>7} {'replay':>7}")
    rows = []
    for i, k in enumerate(kiln_runs[0]):
        ks = [run[i] for run in kiln_runs]
        ts = [run.get((k["schedule"], k["micro_batches"]), {}) for run in torch_runs]
        fields = ("step_ms", "bubble", "model_bubble", "replay_bubble")
        med = {f: statistics.median(r[f] for r in ks) for f in fields}
        t_ms = [t["step_ms"] for t in ts if t.get("step_ms")]
        ratios = [t["step_ms"] / r["step_ms"] for r, t in zip(ks, ts) if t.get("step_ms")]
        t_med = statistics.median(t_ms) if t_ms else None
        ratio = statistics.median(ratios) if ratios else None
        rows.append({**k, **med, "pytorch_step_ms": t_med, "speedup": ratio,
                     "speedup_min": min(ratios) if ratios else None, "speedup_max": max(ratios) if ratios else None,
                     "rounds": a.rounds, "step_ms_rounds": [r["step_ms"] for r in ks],
                     "pytorch_step_ms_rounds": t_ms, "pytorch_error": ts[0].get("error")})
        sched = k["schedule"] if k["virtual_stages"] == 1 else f"{k['schedule']}/{k['virtual_stages']}"
        spread = f"  [{min(ratios):.2f}-{max(ratios):.2f}]" if ratios and a.rounds > 1 else ""
        print(f"{sched:13} {k['micro_batches']:3} {med['step_ms']:9.2f} "
              f"{(f'{t_med:9.2f}' if t_med else '      n/a')} {(f'{ratio:7.2f}x' if ratio else '     n/a')} "
              f"{100 * med['bubble']:11.1f}% {100 * k['ideal_bubble']:6.1f}% {100 * med['model_bubble']:6.1f}% "
              f"{100 * med['replay_bubble']:6.1f}%{spread}")
    print(json.dumps(host.finish({"benchmark": "pipeline_vs_pytorch", "baseline": label, "stages": a.stages,
                                  "results": rows}, children=kiln_lines)))


if __name__ == "__main__":
    main()
