#!/usr/bin/env python3
"""One line per profiled kernel from ncu's raw CSV pages (a row of metric names, a row of units,
then one row per kernel): duration, DRAM throughput, occupancy and the top 3 stall reasons.
Arguments: CSV=ROW_NAME ... (tools/gpu_session.sh writes the CSVs with `ncu -i REP --page raw --csv
--print-units base`)."""
import csv
import re
import sys

TIME_US = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3, "second": 1e6}
BYTES = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12}


def num(s):
    try:
        return float(s.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def short(name):
    """The kernel's name without 'void', namespaces, anonymous namespaces or parameter list."""
    name = name.replace("(anonymous namespace)::", "").removeprefix("void ")
    depth = 0
    for i, c in enumerate(name):
        depth += c == "<"
        depth -= c == ">"
        if c == "(" and depth == 0:
            name = name[:i]
            break
    return re.sub(r"\b\w+::", "", name)


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


print("per kernel: grid x block, duration (ncu replay, base clocks), DRAM throughput % of peak (GB/s),"
      " achieved / theoretical occupancy %, registers, top stalls (warps per issue)")
for arg in sys.argv[1:]:
    path, row = arg.split("=", 1)
    try:
        with open(path) as f:
            table = list(csv.reader(l for l in f if l.startswith('"')))
    except OSError:
        table = []
    print(row)
    if len(table) < 3:
        print("  no kernel profiled: see", path.removesuffix(".csv") + ".log")
        continue
    head, units = table[0], dict(zip(table[0], table[1]))
    for values in table[2:]:
        m = dict(zip(head, values))

        def get(*names):
            return next((num(m[n]) for n in names if num(m.get(n)) is not None), None)

        us = get("gpu__time_duration.sum")
        if us is not None:
            us *= TIME_US.get(units.get("gpu__time_duration.sum"), 1e-3)
        dram = get("dram__throughput.avg.pct_of_peak_sustained_elapsed",
                   "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed")
        # DRAM GB/s: MemoryWorkloadAnalysis's rate, else bytes read and written over the duration.
        rate, rd, wr = get("dram__bytes.sum.per_second"), get("dram__bytes_read.sum"), get("dram__bytes_write.sum")
        gbs = None
        if rate is not None:
            gbs = rate * BYTES.get(units.get("dram__bytes.sum.per_second", "").split("/")[0], 1.0) / 1e9
        elif us and rd is not None and wr is not None:
            gbs = (rd * BYTES.get(units.get("dram__bytes_read.sum"), 1.0) +
                   wr * BYTES.get(units.get("dram__bytes_write.sum"), 1.0)) / (us * 1e3)
        stalls = sorted(((num(v), k) for k, v in m.items()
                         if re.fullmatch(r"smsp__average_warps_issue_stalled_\w+_per_issue_active\.ratio", k)
                         and "_stalled_selected_" not in k and num(v) is not None), reverse=True)[:3]
        top = ", ".join(f"{re.sub(r'^.*_stalled_|_per_issue.*$', '', k)} {v:.2f}" for v, k in stalls)
        grid, block = get("launch__grid_size"), get("launch__block_size")
        print(f"  {short(m.get('Kernel Name', '?'))[:60]:<60} {fmt(grid, '.0f'):>7} x {fmt(block, '.0f'):<4}"
              f" {fmt(us, '9.1f')} us  DRAM {fmt(dram, '5.1f')} % ({fmt(gbs, '.0f')} GB/s)"
              f"  occ {fmt(get('sm__warps_active.avg.pct_of_peak_sustained_active'), '.1f')}"
              f" / {fmt(get('sm__maximum_warps_per_active_cycle_pct'), '.0f')} %"
              f"  regs {fmt(get('launch__registers_per_thread'), '.0f')}  stalls: {top or '-'}")
