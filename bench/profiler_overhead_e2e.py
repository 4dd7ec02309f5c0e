#!/usr/bin/env python3
"""The profiler's end-to-end cost on the main job, in process CPU time (docs/benchmarks.md,
"Profiler overhead"): runs the MLP for one epoch with BASE (a build with
bench/profiler_baseline.patch applied: no profiler hooks), OFF (the normal build) and ON (the
normal build recording every step), interleaved, and prints the paired median ratios, then one
JSON line. Refuses to run on a loaded machine unless --allow-load (bench/host_check.py).

    python3 bench/profiler_overhead_e2e.py BASE_MNIST OFF_MNIST [ROUNDS] [--allow-load]
"""
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from host_check import HostCheck  # noqa: E402


def main():
    allow_load = "--allow-load" in sys.argv[1:]
    args = [a for a in sys.argv[1:] if a != "--allow-load"]
    if len(args) < 2:
        sys.exit(__doc__)
    base, off = args[0], args[1]
    rounds = int(args[2]) if len(args) > 2 else 11
    host = HostCheck("profiler_overhead_e2e", allow_load)
    trace_dir = tempfile.mkdtemp(prefix="kiln_profile_")
    variants = {
        "base": [base],
        "off": [off],
        "on": [off, "--profile", trace_dir, "--profile-steps", "0,0,100000"],
    }
    common = ["--model", "mlp", "--epochs", "1", "--threads", "1", "--log-every", "1000"]
    res = {k: {"cpu": [], "sps": []} for k in variants}
    for _ in range(rounds):
        for name, cmd in variants.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            out = subprocess.run(cmd + common, capture_output=True, text=True,
                                 env=dict(os.environ, KILN_NUM_THREADS="1"))
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if out.returncode != 0:
                sys.exit(f"{name}: {' '.join(cmd)} exited {out.returncode}:\n{out.stderr[-2000:]}")
            line = [l for l in out.stdout.splitlines() if l.startswith("{")][-1]
            res[name]["cpu"].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            res[name]["sps"].append(json.loads(line)["samples_per_sec"])
    for name in variants:
        print(f"{name}: median CPU {statistics.median(res[name]['cpu']):.3f} s, "
              f"median {statistics.median(res[name]['sps']):.0f} samples/s")
    ratios = {}
    for name in ("off", "on"):
        cpu = statistics.median(a / b for a, b in zip(res[name]["cpu"], res["base"]["cpu"]))
        sps = statistics.median(a / b for a, b in zip(res[name]["sps"], res["base"]["sps"]))
        print(f"{name}: paired median CPU-time ratio to base {cpu:.4f}, samples/s ratio {sps:.4f}")
        ratios[f"{name}_cpu_ratio"], ratios[f"{name}_samples_per_sec_ratio"] = cpu, sps
    print(json.dumps(host.finish({"benchmark": "profiler_overhead_e2e", "rounds": rounds, **ratios})))


if __name__ == "__main__":
    main()
