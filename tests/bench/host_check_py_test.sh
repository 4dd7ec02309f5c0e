#!/usr/bin/env bash
# bench/host_check.py, the *_vs_pytorch scripts' host check, on fixed /proc text (the same cases
# as host_check_test.cc): the parsers, the busy cores, the refusal above 0.2 busy cores (exit 3,
# naming the figure) unless --allow-load (the result marked "noisy"), --allow-load passed down to
# Kiln's benchmarks only when given, and a noisy benchmark making the script's result noisy.
# Arguments: bench/host_check.py.
set -u
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$(dirname "$1")" python3 - <<'EOF'
import contextlib
import io
import math

import host_check as hc

failures = []


def check(what, got, want):
    ok = abs(got - want) < 1e-9 if isinstance(want, float) and isinstance(got, float) else got == want
    print(("ok: " if ok else "FAIL: ") + f"{what}: {got!r}" + ("" if ok else f", wanted {want!r}"))
    if not ok:
        failures.append(what)


BEFORE = ("cpu  1000 10 300 50000 200 5 15 20 400 0\n"
          "cpu0 500 5 150 25000 100 3 7 10 200 0\n"
          "cpu1 500 5 150 25000 100 2 8 10 200 0\n"
          "intr 123456 0 0\nctxt 987654\nprocs_running 1\n")
# 400 jiffies on 2 CPUs, 150 of them busy (user 120, system 20, softirq 10): 0.75 cores.
AFTER = ("cpu  1120 10 320 50250 200 5 25 20 400 0\n"
         "cpu0 560 5 160 25125 100 3 12 10 200 0\n"
         "cpu1 560 5 160 25125 100 2 13 10 200 0\n")
QUIET = ("cpu  1000 10 300 50390 210 5 15 20 400 0\n"
         "cpu0 500 5 150 25195 105 3 7 10 200 0\n"
         "cpu1 500 5 150 25195 105 2 8 10 200 0\n")
CPUINFO = ("processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel\t\t: 1\n"
           "model name\t: AMD EPYC 7B13   64-Core Processor\n\nprocessor\t: 1\nmodel name\t: something else\n")

b = hc.parse_proc_stat(BEFORE)
check("busy jiffies (guest inside user)", b[0], 1000 + 10 + 300 + 5 + 15 + 20)
check("total jiffies", b[1], b[0] + 50000 + 200)
check("cpus", hc.count_cpus(BEFORE), 2)
check("old kernel's short line", hc.parse_proc_stat("cpu 10 0 5 100\n"), (15, 115))
for bad in ("cpu0 1 2 3 4\n", "cpu  1 2\n", ""):
    try:
        hc.parse_proc_stat(bad)
        check(f"{bad!r} refused", False, True)
    except ValueError:
        check(f"{bad!r} refused", True, True)
check("busy cores", hc.busy_cores(b, hc.parse_proc_stat(AFTER), 2), 0.75)
check("busy cores, quiet", hc.busy_cores(b, hc.parse_proc_stat(QUIET), 2), 0.0)
check("busy cores, no time passed", hc.busy_cores(b, b, 2), 0.0)
check("one of 16 cores", hc.busy_cores((0, 0), (200, 3200), 16), 1.0)
check("judge 0.2", hc.judge_load(0.2, False), "quiet")
check("judge 0.21", hc.judge_load(0.21, False), "refused")
check("judge 0.21 --allow-load", hc.judge_load(0.21, True), "noisy")
check("judge 0.05 --allow-load", hc.judge_load(0.05, True), "quiet")
check("judge unknown", hc.judge_load(math.nan, False), "refused")
check("model name", hc.parse_cpu_model(CPUINFO), "AMD EPYC 7B13 64-Core Processor")
check("arm Processor", hc.parse_cpu_model("processor\t: 0\nProcessor\t: ARMv7 Processor rev 4 (v7l)\n"),
      "ARMv7 Processor rev 4 (v7l)")
check("no model", hc.parse_cpu_model("processor\t: 0\nBogoMIPS\t: 50.00\n"), "unknown CPU")
check("loadavg", hc.parse_loadavg("1.71 1.45 1.36 6/278 16891\n"), 1.71)
check("loadavg unreadable", hc.parse_loadavg(""), -1.0)


def fake_proc(second_stat, loads=("1.50 1 1 1/1 1\n", "0.70 1 1 1/1 1\n")):
    """A /proc reader: /proc/stat gives BEFORE then `second_stat`; /proc/loadavg each of `loads`."""
    stats, avgs = [BEFORE, second_stat], list(loads)
    texts = {"/proc/cpuinfo": lambda: CPUINFO, "/proc/stat": lambda: stats.pop(0), "/proc/loadavg": lambda: avgs.pop(0)}
    return lambda path: texts[path]()


def run(second_stat, allow_load):
    """(HostCheck or None, exit code or None, stdout, stderr)."""
    out, err, slept = io.StringIO(), io.StringIO(), []
    host, code = None, None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            host = hc.HostCheck("fake_vs_pytorch", allow_load, read=fake_proc(second_stat), sleep=slept.append)
        except SystemExit as e:
            code = e.code
    check("slept 2 s between the samples", slept, [2.0])
    return host, code, out.getvalue(), err.getvalue()


host, code, out, err = run(AFTER, False)
check("loaded: exit 3", code, 3)
check("loaded: the refusal names the busy cores", "kept 0.75 cores busy over 2 s" in err and "--allow-load" in err, True)
check("loaded: the start line", out.splitlines()[0] if out else "",
      "host: AMD EPYC 7B13 64-Core Processor, 2 cores, load average 1.50; other processes kept 0.75 cores busy over 2 s")

host, code, out, err = run(AFTER, True)
check("loaded, --allow-load: runs", code, None)
check("loaded, --allow-load: passed down", host.child_flags(), ["--allow-load"])
with contextlib.redirect_stdout(io.StringIO()) as end:
    result = host.finish({"benchmark": "fake"})
check("loaded, --allow-load: noisy", result["noisy"], True)
check("loaded, --allow-load: host", result["host"], {
    "cpu_model": "AMD EPYC 7B13 64-Core Processor", "cores": 2, "load_average_start": 1.5,
    "load_average_end": 0.7, "busy_cores": 0.75, "max_busy_cores": 0.2})
check("the end line", end.getvalue().splitlines()[0],
      "host: AMD EPYC 7B13 64-Core Processor, 2 cores, load average 0.70 at the end (1.50 at the start); "
      "noisy: the machine was loaded at the start")
check("the result's own fields kept", result["benchmark"], "fake")

host, code, out, err = run(QUIET, False)
check("quiet: runs", code, None)
check("quiet: nothing passed down (the benchmarks check again)", host.child_flags(), [])
with contextlib.redirect_stdout(io.StringIO()):
    result = host.finish({"benchmark": "fake"}, children=[{"noisy": False}, {"results": []}])
check("quiet: not noisy", result["noisy"], False)
check("quiet: busy cores", result["host"]["busy_cores"], 0.0)

host, code, out, err = run(QUIET, True)
with contextlib.redirect_stdout(io.StringIO()) as end:
    result = host.finish({"benchmark": "fake"}, children=[{"noisy": False}, {"noisy": True}])
check("a noisy benchmark makes the result noisy", result["noisy"], True)
check("the end line says why", "a Kiln benchmark it ran found the machine loaded" in end.getvalue(), True)

if failures:
    raise SystemExit(f"{len(failures)} failure(s)")
print("all host_check.py checks passed")
EOF
