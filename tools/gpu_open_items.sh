#!/usr/bin/env bash
# What tools/gpu_first_light.sh left open, in one go on a GPU host without Bazel (about 6-9
# minutes): gpu_open_items.sh BUNDLE_DIR DATA_DIR [OUT_DIR], the arguments of gpu_first_light.sh
# (BUNDLE_DIR is the unpacked //cuda:gpu_bundle; DATA_DIR is not read, nothing here trains). In
# order, each section printing a summary and leaving its logs in OUT_DIR (default
# ./gpu_open_items):
#   tests      every CUDA test (run_gpu_tests.sh), first, as in gpu_first_light.sh;
#   ncu        an Nsight Compute profile of one warmed call of each cuda_bench row under 80 % of a
#              copy: kernel, duration, DRAM throughput (% of peak), achieved occupancy, top stalls;
#   attention  attention_bench on the GPU (bf16, f32) beside PyTorch's F.scaled_dot_product_attention,
#              then bench/attention_vs_pytorch.py (this checkout's) on the host's CPU cores;
#   nccl       all-reduce (beside allreduce_pytorch.py), reduce-scatter and all-gather through NCCL
#              with 2 ranks on the one GPU;
#   racecheck  compute-sanitizer --tool racecheck over every CUDA test binary, in parallel, with
#              memcheck's exclusions; last, as it is the longest (at most 240 s, less if the run
#              is past 5.5 minutes; $KILN_RACECHECK_TIMEOUT overrides) and the benchmarks want the
#              GPU to themselves.
# KILN_GPU_SECTIONS="ncu nccl" runs only those sections (in the order above), e.g. in a second
# call when the first ran out of time.
set -u
B=$(cd "${1:?bundle dir}" && pwd)
: "${2:?data dir (not read; the arguments of gpu_first_light.sh)}"
out=${3:-$PWD/gpu_open_items}
mkdir -p "$out"
out=$(cd "$out" && pwd)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# py, ldp (Kiln's library path), sec, kiln and wrapped.
# shellcheck source=tools/gpu_env.sh
. "$repo/tools/gpu_env.sh"
sections=" ${KILN_GPU_SECTIONS:-tests ncu attention nccl racecheck} "
want() { [[ $sections == *" $1 "* ]]; }
# A CUDA tool on PATH, else in the toolkit's bin/ (empty when neither has it).
cuda_tool() {
  command -v "$1" || { [ -x "${CUDA_PATH:-/usr/local/cuda}/bin/$1" ] && echo "${CUDA_PATH:-/usr/local/cuda}/bin/$1"; }
}

if want tests; then
  sec tests
  KILN_GPU_TEST_TIMEOUT=120 timeout 300 "$B/run_gpu_tests.sh" > "$out/tests.log" 2>&1
  echo "run_gpu_tests.sh exit $?"
  grep -E "^---- |passed, " "$out/tests.log"
fi

if want ncu; then
  sec "ncu: the cuda_bench rows under 80 % of a copy"
  # One process per row (cuda_bench --only), so each report holds that row's kernels only: the
  # call cuda_bench makes between cudaProfilerStart and cudaProfilerStop after timing the row.
  # Defaults kept: caches flushed and clocks locked to base for each replay pass.
  ncu=$(cuda_tool ncu)
  rows=("sum f32 (first dim)" "add f32 broadcast row" "sum f32 (all)" "softmax f32 (rows 8192)" "adamw step f32"
        "transpose copy f32")
  what=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy
        --section WarpStateStats --section SchedulerStats)
  if [ -z "$ncu" ]; then
    echo "no ncu on PATH or in ${CUDA_PATH:-/usr/local/cuda}/bin"
  else
    # The DRAM figure asked for, where this ncu knows it (an unknown metric fails the whole run);
    # SpeedOfLight's gpu__dram_throughput stands in otherwise.
    "$ncu" --query-metrics 2>/dev/null | grep -qw dram__throughput &&
      what+=(--metrics dram__throughput.avg.pct_of_peak_sustained_elapsed)
    reports=()
    for i in "${!rows[@]}"; do
      rm -f "$out/ncu.$i.ncu-rep" "$out/ncu.$i.csv"
      timeout 180 "$ncu" --profile-from-start off --target-processes all "${what[@]}" -f -o "$out/ncu.$i" \
        env LD_LIBRARY_PATH="$ldp" "$B/bench/cuda_bench" --only "${rows[$i]}" > "$out/ncu.$i.log" 2>&1
      rc=$?
      [ "$rc" = 0 ] || echo "ncu exit $rc on '${rows[$i]}': $(grep -m1 -E '==ERROR==|ERR_|error' "$out/ncu.$i.log")"
      [ -f "$out/ncu.$i.ncu-rep" ] &&
        "$ncu" -i "$out/ncu.$i.ncu-rep" --page raw --csv --print-units base > "$out/ncu.$i.csv" 2>> "$out/ncu.$i.log"
      reports+=("$out/ncu.$i.csv=${rows[$i]}")
    done
    grep -qs ERR_NVGPUCTRPERM "$out"/ncu.*.log &&
      echo "ncu may not read the GPU's counters here (ERR_NVGPUCTRPERM): run as root, or the driver needs NVreg_RestrictProfilingToAdminUsers=0"
    "$py" - "${reports[@]}" <<'EOF' | tee "$out/ncu_summary.txt"
"""One line per profiled kernel from ncu's raw CSV pages (a row of metric names, a row of units,
then one row per kernel): duration, DRAM throughput, occupancy and the top 3 stall reasons."""
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
EOF
  fi
fi

if want attention; then
  sec "attention: on the GPU beside PyTorch, then on the CPU beside PyTorch"
  for dt in bf16 f32; do
    timeout 300 env LD_LIBRARY_PATH="$ldp" "$B/bench/attention_bench" --device cuda --dtype "$dt" \
      --seqs 256,1024,4096 --reps 10 > "$out/attention.cuda.$dt.log" 2>&1 || echo "attention_bench --dtype $dt: exit $?"
    timeout 300 "$py" - "$out/attention.cuda.$dt.log" 10 <<'EOF' > "$out/attention_vs_pytorch.cuda.$dt.log" 2>&1
"""attention_bench's CUDA rows (its last line, JSON) beside PyTorch's F.scaled_dot_product_attention
on the same GPU, shapes and dtype, timed as attention_bench times (best of REPS after a warm-up,
synchronized), with the peak memory of one step above the inputs. argv: LOG REPS."""
import json
import sys
import time

import torch
import torch.nn.functional as F

kiln = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
reps = int(sys.argv[2])
dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[kiln["dtype"]]
B, H, D = kiln["B"], kiln["H"], kiln["D"]
torch.manual_seed(0)
print(f"attention on {torch.cuda.get_device_name()}, {kiln['dtype']}, causal, B={B} H={H} D={D}, best of {reps};"
      f" PyTorch {torch.__version__}")
print(f"{'T':>6} {'':>20} {'Kiln fused':>11} {'Kiln comp.':>11} {'PyTorch':>11} {'PyTorch/fused':>14}")
rows = []
for kr in kiln["rows"]:
    T = kr["T"]
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
    g = torch.randn(B, H, T, D, device="cuda", dtype=dt)

    def step():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)
        q.grad = k.grad = v.grad = None
        torch.cuda.synchronize()

    step()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    peak = (torch.cuda.max_memory_allocated() - before) / 2**20
    fwd = st = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.cuda.synchronize()
        fwd = min(fwd, time.perf_counter() - t0)
        t0 = time.perf_counter()
        step()
        st = min(st, time.perf_counter() - t0)
    for what, kf, kc, t in (("forward ms", kr["fused_fwd_ms"], kr["composite_fwd_ms"], fwd * 1e3),
                            ("forward+backward ms", kr["fused_step_ms"], kr["composite_step_ms"], st * 1e3),
                            ("peak MiB", kr["fused_peak_mib"], kr["composite_peak_mib"], peak)):
        print(f"{T:>6} {what:>20} {kf:>11.2f} {kc:>11.2f} {t:>11.2f} {t / kf:>13.2f}x")
    rows.append({**kr, "torch_fwd_ms": fwd * 1e3, "torch_step_ms": st * 1e3, "torch_peak_mib": peak})
print(json.dumps({"bench": "attention_vs_pytorch", "device": "cuda", "dtype": kiln["dtype"],
                  "torch": torch.__version__, "rows": rows}))
EOF
    echo "exit $?: $(grep -v '^{' "$out/attention_vs_pytorch.cuda.$dt.log" | head -1)"
    grep -v '^{' "$out/attention_vs_pytorch.cuda.$dt.log" | tail -n +2 | tail -12
  done
  # The CPU comparison of docs/benchmarks.md's Attention section, on this host's idle cores.
  KILN_TORCH_PYTHON=$py timeout 300 "$py" "$repo/bench/attention_vs_pytorch.py" \
    --attention-bench "$(wrapped attention_bench)" --seqs 256,1024 --reps 5 > "$out/attention_vs_pytorch.cpu.log" 2>&1
  echo "attention_vs_pytorch.py (CPU) exit $?"
  grep -v '^{' "$out/attention_vs_pytorch.cpu.log" | tail -12
fi

if want nccl; then
  sec "NCCL: 2 ranks on the one GPU"
  # two_ranks PORT LOG COMMAND...: ranks 0 and 1 of COMMAND on the first GPU, each its own
  # NCCL_HOSTID and sockets over loopback (NCCL refuses two ranks on one GPU of one host
  # otherwise); rank r writes LOG.r. Fails when either rank does.
  two_ranks() {
    local port=$1 log=$2 r rc=0 pids=()
    shift 2
    for r in 0 1; do
      RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        NCCL_HOSTID=kiln-host-$r NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo \
        timeout 120 "$@" > "$log.$r" 2>&1 &
      pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || rc=$?; done
    return "$rc"
  }
  table() { grep -E '^ *[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ *$' "$1"; }
  two_ranks 29631 "$out/nccl.allreduce.kiln" env LD_LIBRARY_PATH="$ldp" "$B/bench/allreduce_bench" --backend nccl
  echo "Kiln all-reduce exit $?"
  two_ranks 29632 "$out/nccl.allreduce.pytorch" "$py" "$B/scripts/allreduce_pytorch.py"
  echo "PyTorch all-reduce exit $?"
  echo "all-reduce (f32 sum):  bytes   Kiln us  PyTorch us  Kiln busbw  PyTorch busbw (GB/s)"
  awk 'FILENAME == ARGV[1] { us[$1] = $2; bw[$1] = $4; next }
       { printf "%12s %10s %10s %10s %10s\n", $1, $2, ($1 in us) ? us[$1] : "-", $4, ($1 in bw) ? bw[$1] : "-" }' \
    <(table "$out/nccl.allreduce.pytorch.0") <(table "$out/nccl.allreduce.kiln.0")
  port=29633
  for op in reduce_scatter allgather; do
    two_ranks $((port++)) "$out/nccl.$op.kiln" env LD_LIBRARY_PATH="$ldp" "$B/bench/allreduce_bench" --backend nccl \
      --op "$op"
    echo "Kiln $op exit $? (bytes, us, algbw GB/s, busbw GB/s; no PyTorch counterpart in the bundle)"
    table "$out/nccl.$op.kiln.0"
  done
fi

if want racecheck; then
  sec "racecheck: every CUDA test binary"
  sanitizer=$(cuda_tool compute-sanitizer)
  # Each binary's limit: 240 s, less when the sections before took long, so that the whole run
  # ends within about 9.5 minutes (a device call's limit is 10); at least 60 s.
  limit=$((570 - SECONDS))
  ((limit > 240)) && limit=240
  ((limit < 60)) && limit=60
  limit=${KILN_RACECHECK_TIMEOUT:-$limit}
  for t in "$B"/tests/*; do
    n=$(basename "$t")
    # As memcheck in gpu_first_light.sh: a device reset; several processes; no GPU work at all
    # (the sanitizer then exits 255). API errors the tests provoke on purpose are not reported.
    case $n in cuda_failure_paths_test | nccl_test | kernel_coverage_test) continue ;; esac
    (start=$SECONDS
     timeout "$limit" env LD_LIBRARY_PATH="$ldp" "${sanitizer:-compute-sanitizer}" --tool racecheck \
       --report-api-errors no --error-exitcode 9 "$t" > "$out/racecheck.$n.log" 2>&1
     rc=$?
     case $rc in 0) verdict=clean ;; 9) verdict=HAZARDS ;; 124) verdict="TIMED OUT after $limit s" ;; *) verdict=FAILED ;; esac
     printf '%-26s exit %3s %4s s  %-10s %s\n' "$n" "$rc" "$((SECONDS - start))" "$verdict" \
       "$(grep -m1 -o 'RACECHECK SUMMARY.*' "$out/racecheck.$n.log")" > "$out/racecheck.$n.summary") &
  done
  wait
  cat "$out"/racecheck.*.summary
fi
sec "done"
