#!/usr/bin/env python3
"""Kiln's pipeline (//bench:pipeline_bench) against PyTorch's torch.distributed.pipelining
(bench/pytorch_pipeline.py) on the same model, split, micro-batches and machine, run one after
the other: step time per schedule and micro-batch count, the ratio, and Kiln's measured bubble
beside the ideal of equal stages and the model's (its measured stage times replayed through the
schedule with free communication). PyTorch comes from the same environment as vs_pytorch.py; ends with one JSON line."""
import argparse
import json

from vs_pytorch import last_json, torch_python


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kiln-bin", required=True)
    p.add_argument("--pytorch-script", required=True)
    p.add_argument("--stages", type=int, default=2)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--micro", default="1,2,4,8,16")
    p.add_argument("--virtual-stages", type=int, default=2, help="chunks per rank of the interleaved rows (1: none)")
    a = p.parse_args()
    py, label = torch_python()
    common = ["--stages", str(a.stages), "--steps", str(a.steps), "--micro", a.micro,
              "--virtual-stages", str(a.virtual_stages)]
    kiln = last_json([a.kiln_bin] + common)["results"]
    torch = {(r["schedule"], r["micro_batches"]): r for r in last_json([py, a.pytorch_script] + common)["results"]}
    print(f"\nKiln vs {label} pipelining, {a.stages} stages x 1 thread, Gloo, median of {a.steps} steps")
    print(f"{'sched':13} {'m':>3} {'kiln ms':>9} {'torch ms':>9} {'speedup':>8} {'kiln bubble':>12} {'ideal':>7} "
          f"{'model':>7}")
    rows = []
    for k in kiln:
        t = torch.get((k["schedule"], k["micro_batches"]), {})
        t_ms = t.get("step_ms")
        ratio = t_ms / k["step_ms"] if t_ms else None
        rows.append({**k, "pytorch_step_ms": t_ms, "speedup": ratio, "pytorch_error": t.get("error")})
        sched = k["schedule"] if k["virtual_stages"] == 1 else f"{k['schedule']}/{k['virtual_stages']}"
        print(f"{sched:13} {k['micro_batches']:3} {k['step_ms']:9.2f} "
              f"{(f'{t_ms:9.2f}' if t_ms else '      n/a')} {(f'{ratio:7.2f}x' if ratio else '     n/a')} "
              f"{100 * k['bubble']:11.1f}% {100 * k['ideal_bubble']:6.1f}% {100 * k['model_bubble']:6.1f}%")
    print(json.dumps({"benchmark": "pipeline_vs_pytorch", "baseline": label, "stages": a.stages, "results": rows}))


if __name__ == "__main__":
    main()
