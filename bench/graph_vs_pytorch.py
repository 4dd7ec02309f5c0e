#!/usr/bin/env python3
"""Kiln's CUDA graph step against PyTorch's on the same GPU: the MNIST MLP training step at batch
128, Kiln eager and with one replayed CUDA graph (bench/graph_bench.cc), PyTorch eager and with
torch.compile(mode="reduce-overhead") (bench/pytorch_graph.py). The targets: Kiln's graph step
>= 2x its eager step, and faster than PyTorch's reduce-overhead step. Ends with one JSON line.
Refuses to run on a loaded machine unless --allow-load (bench/host_check.py), which graph_bench
also gets."""
import argparse
import json
import sys

from host_check import HostCheck, add_allow_load
from vs_pytorch import last_json, torch_python


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--graph-bench", required=True)
    p.add_argument("--pytorch-script", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--blocks", type=int, default=5)
    add_allow_load(p)
    a = p.parse_args()
    py, label = torch_python()
    host = HostCheck("graph_vs_pytorch", a.allow_load)
    common = ["--device", a.device, "--batch-size", str(a.batch_size), "--steps", str(a.steps),
              "--blocks", str(a.blocks)]
    kiln = last_json([a.graph_bench] + common + host.child_flags())
    if "skipped" in kiln:
        print(f"graph_vs_pytorch: Kiln's benchmark skipped ({kiln['skipped']})")
        sys.exit(1)
    torch_ms = {m: last_json([py, a.pytorch_script, "--mode", m] + common)["step_ms"]
                for m in ("eager", "reduce-overhead")}
    rows = [("Kiln", "eager", kiln["eager_step_ms"]), ("Kiln", "cuda graph", kiln["graph_step_ms"]),
            ("PyTorch", "eager", torch_ms["eager"]),
            ("PyTorch", 'compile "reduce-overhead"', torch_ms["reduce-overhead"])]
    best = kiln["graph_step_ms"]
    print(f"\nMNIST MLP training step, batch {a.batch_size}, on {a.device}: Kiln vs {label}")
    print(f"{'framework':9} {'mode':27} {'step ms':>9} {'x own eager':>11} {'x Kiln graph':>12}")
    for fw, mode, ms in rows:
        own = kiln["eager_step_ms"] if fw == "Kiln" else torch_ms["eager"]
        print(f"{fw:9} {mode:27} {ms:9.4f} {own / ms:10.2f}x {ms / best:11.2f}x")
    speedup = kiln["eager_step_ms"] / kiln["graph_step_ms"]
    vs_compile = torch_ms["reduce-overhead"] / kiln["graph_step_ms"]
    print(f"Kiln graph vs Kiln eager: {speedup:.2f}x (target >= 2x); "
          f"PyTorch reduce-overhead / Kiln graph: {vs_compile:.2f}x (target > 1)")
    print(json.dumps(host.finish({"benchmark": "graph_vs_pytorch", "device": a.device, "baseline": label,
                                  "batch_size": a.batch_size, "kiln_eager_ms": kiln["eager_step_ms"],
                                  "kiln_graph_ms": kiln["graph_step_ms"], "pytorch_eager_ms": torch_ms["eager"],
                                  "pytorch_reduce_overhead_ms": torch_ms["reduce-overhead"],
                                  "kiln_graph_speedup": speedup, "pytorch_compile_over_kiln_graph": vs_compile},
                                 children=[kiln])))


if __name__ == "__main__":
    main()
