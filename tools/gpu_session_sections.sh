# shellcheck shell=bash disable=SC2154  # B, OUT, repo and work come from tools/gpu_session.sh
# The sections of tools/gpu_session.sh, sourced by it in a child `bash ... --section NAME` that
# runs under `timeout` with the section's budget ($KILN_SECTION_BUDGET seconds). Each prints what
# it measured, leaves its logs in $work and may write $work/NAME.json, which the session's JSON
# carries; a non-zero exit fails the section.
out=$work
# py (the host's PyTorch), ldp (Kiln's library path), sec, kiln and wrapped.
# shellcheck source=tools/gpu_env.sh
. "$repo/tools/gpu_env.sh"
# A CUDA tool on PATH, else in the toolkit's bin/ (empty when neither has it).
cuda_tool() {
  command -v "$1" || { [ -x "${CUDA_PATH:-/usr/local/cuda}/bin/$1" ] && echo "${CUDA_PATH:-/usr/local/cuda}/bin/$1"; }
}
# Seconds left of this section's budget.
left() { echo $((KILN_SECTION_BUDGET - SECONDS)); }
# PyTorch with CUDA, or a failure naming the Python tried.
need_torch() {
  "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && return 0
  echo "FAILED: $py has no PyTorch with CUDA (set \$PYTHON): the comparison with PyTorch cannot run"
  return 1
}

section_tests() {
  KILN_GPU_TEST_TIMEOUT=${KILN_GPU_TEST_TIMEOUT:-60} "$B/run_gpu_tests.sh" > "$work/tests.full.log" 2>&1
  local rc=$?
  grep -E "^---- |passed, |^failed: " "$work/tests.full.log"
  python3 - "$work/tests.full.log" > "$work/tests.json" <<'EOF'
import json, re, sys
text = open(sys.argv[1]).read()
m = re.findall(r"^(\d+) passed, (\d+) failed$", text, re.M)
tests = {n: s for n, s in re.findall(r"^---- (\S+) (passed|FAILED)", text, re.M)}
print(json.dumps({"passed": int(m[-1][0]) if m else 0, "failed": int(m[-1][1]) if m else None, "tests": tests}))
EOF
  return "$rc"
}

section_gpt() {
  need_torch || return 1
  local g="$work/gpt" rc
  mkdir -p "$g"
  # The corpus both sides read: this host's Python standard library sources (several MB of text
  # every host has), the same bytes for Kiln and PyTorch.
  python3 - "$g/corpus.txt" <<'EOF'
import glob, os, sys, sysconfig
files = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "**", "*.py"), recursive=True))
data = bytearray()
for f in files:
    data += open(f, "rb").read()
    if len(data) > 8 << 20:
        break
open(sys.argv[1], "wb").write(bytes(data))
print(f"corpus: {len(data)} bytes of {sys.argv[1]}")
EOF
  # No comparison run starts in the last third of the budget (at most 100 s), which the profile
  # below needs, and none runs into the last 20 s.
  local reserve=$((KILN_SECTION_BUDGET / 3)) run_limit=$(($(left) - 20))
  ((reserve > 100)) && reserve=100
  ((run_limit > 150)) && run_limit=150  # a hung run must leave time for the others
  ((run_limit < 10)) && run_limit=10
  python3 "$repo/bench/gpt_gpu_vs_pytorch.py" --kiln-bin "$(kiln_wrapper bin/gpt)" --python "$py" \
    --pytorch-script "$repo/bench/gpt_pytorch.py" --data "$g/corpus.txt" --workdir "$g" --json "$OUT/gpt.json" \
    --rounds "${KILN_GPT_ROUNDS:-2}" --budget-s $(($(left) - reserve)) --run-timeout "$run_limit"
  rc=$?
  # The targets: >= 1.0x torch.compile's tokens/s and >= 1.2x eager's. A miss gets the op table of
  # one profiled Kiln run (steps 4-6 of 8).
  if python3 - "$OUT/gpt.json" <<'EOF'; then
import json, sys
s = json.load(open(sys.argv[1])).get("summary", {})
met = s.get("kiln_vs_compile", 0) >= 1.0 and s.get("kiln_vs_eager", 0) >= 1.2
sys.exit(0 if met else 1)
EOF
    echo "GPT: Kiln meets both speed targets"
  elif (($(left) > 20)); then
    echo "GPT: Kiln misses a speed target (or did not run): profiling 3 steps"
    kiln "$B/bin/gpt" --init-from-hf "$g/init_hf" --data "$g/corpus.txt" --batch-size 16 --seq-len 1024 \
      --max-steps 8 --eval-every 0 --eval-batches 1 --sample-tokens 0 --device cuda --amp bf16 \
      --profile "$g/profile" --profile-steps 2,1,3 > "$g/profile.log" 2>&1
    echo "profiled run exit $?"
    sed -n '/^profiler:/,$p' "$g/profile.log" | head -45
  fi
  return "$rc"
}

section_attention() {
  need_torch || return 1
  env LD_LIBRARY_PATH="$ldp" "$B/bench/attention_bench" --device cuda --dtype bf16 --seqs 1024,4096 --reps 10 \
    > "$work/attention.kiln.log" 2>&1 || { echo "attention_bench: exit $?"; tail -3 "$work/attention.kiln.log"; return 1; }
  "$py" "$repo/bench/attention_gpu_vs_pytorch.py" "$work/attention.kiln.log" 10 > "$work/attention.log" 2>&1
  local rc=$?
  grep -v '^{' "$work/attention.log"
  grep '^{' "$work/attention.log" | tail -1 > "$work/attention.json"
  return "$rc"
}

# The cuda_bench rows the last GPU session left under 80 % of a device copy.
rows=("sum f32 (first dim)" "add f32 broadcast row" "sum f32 (all)" "softmax f32 (rows 8192)" "adamw step f32"
      "transpose copy f32")

section_rows() {
  local only ncu i
  only=$(IFS=,; echo "${rows[*]}")
  kiln "$B/bench/cuda_bench" --only "$only" > "$work/rows.log" 2>&1 || { echo "cuda_bench: exit $?"; tail -3 "$work/rows.log"; return 1; }
  grep -E "^(op |device|.* [0-9]+%$)" "$work/rows.log"
  grep '^{' "$work/rows.log" | tail -1 > "$work/rows.json"
  ncu=$(cuda_tool ncu)
  [ -n "$ncu" ] || { echo "no ncu: no kernel lines"; return 0; }
  # One ncu line per row under 80 % of the copy, while time remains (clocks left as found).
  local reports=()
  for i in "${!rows[@]}"; do
    python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); sys.exit(0 if r.get(sys.argv[2] + " of roof", 1) < 0.8 else 1)' \
      "$work/rows.json" "${rows[$i]}" || continue
    (($(left) > 25)) || { echo "ncu: no time left for '${rows[$i]}'"; continue; }
    timeout $(($(left) - 10)) "$ncu" --clock-control none --profile-from-start off --target-processes all \
      --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats -f -o "$work/ncu.$i" \
      env LD_LIBRARY_PATH="$ldp" "$B/bench/cuda_bench" --only "${rows[$i]}" > "$work/ncu.$i.log" 2>&1 ||
      echo "ncu exit $? on '${rows[$i]}'"
    [ -f "$work/ncu.$i.ncu-rep" ] &&
      "$ncu" -i "$work/ncu.$i.ncu-rep" --page raw --csv --print-units base > "$work/ncu.$i.csv" 2>> "$work/ncu.$i.log"
    reports+=("$work/ncu.$i.csv=${rows[$i]}")
  done
  ((${#reports[@]})) && python3 "$repo/tools/ncu_summary.py" "${reports[@]}"
  return 0
}

section_nccl() {
  need_torch || return 1
  local port=29641 op who rc=0
  # two_ranks LOG COMMAND...: ranks 0 and 1 of COMMAND on the first GPU, each its own NCCL_HOSTID
  # and sockets over loopback (NCCL refuses two ranks on one GPU of one host otherwise).
  two_ranks() {
    local log=$1 r bad=0 pids=()
    shift
    for r in 0 1; do
      RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        NCCL_HOSTID=kiln-host-$r NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo \
        "$@" > "$log.$r" 2>&1 &
      pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || bad=1; done
    port=$((port + 1))
    return "$bad"
  }
  for op in reduce_scatter allgather; do
    two_ranks "$work/nccl.$op.kiln" env LD_LIBRARY_PATH="$ldp" "$B/bench/allreduce_bench" --backend nccl --op "$op" ||
      { echo "Kiln $op failed: $(tail -1 "$work/nccl.$op.kiln.0")"; rc=1; }
    two_ranks "$work/nccl.$op.pytorch" "$py" "$repo/bench/allreduce_pytorch.py" --op "$op" ||
      { echo "PyTorch $op failed: $(tail -1 "$work/nccl.$op.pytorch.0")"; rc=1; }
    echo "$op, 2 ranks on one GPU over sockets:     bytes    Kiln us  PyTorch us  Kiln busbw  PyTorch busbw (GB/s)"
    table() { grep -E '^ *[0-9]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ *$' "$1" 2>/dev/null; }
    awk 'FILENAME == ARGV[1] { us[$1] = $2; bw[$1] = $4; next }
         { printf "%50s %10s %10s %10s %10s\n", $1, $2, ($1 in us) ? us[$1] : "-", $4, ($1 in bw) ? bw[$1] : "-" }' \
      <(table "$work/nccl.$op.pytorch.0") <(table "$work/nccl.$op.kiln.0")
  done
  python3 - "$work" > "$work/nccl.json" <<'EOF'
import json, os, sys
out = {}
for op in ("reduce_scatter", "allgather"):
    for who in ("kiln", "pytorch"):
        try:
            line = [l for l in open(os.path.join(sys.argv[1], f"nccl.{op}.{who}.0")) if l.startswith("{")][-1]
            out[f"{op} {who}"] = json.loads(line)["results"]
        except (OSError, IndexError, ValueError, KeyError):
            out[f"{op} {who}"] = None
print(json.dumps(out))
EOF
  return "$rc"
}

section_racecheck() {
  local sanitizer t n limit
  sanitizer=$(cuda_tool compute-sanitizer)
  [ -n "$sanitizer" ] || { echo "no compute-sanitizer"; return 1; }
  limit=$(($(left) - 10))
  for t in "$B"/tests/*; do
    n=$(basename "$t")
    # A device reset; several processes; no GPU work at all (the sanitizer then exits 255); the
    # six binaries the first GPU session ran racecheck over (0 hazards, docs/benchmarks.md).
    case $n in
      cuda_failure_paths_test | nccl_test | kernel_coverage_test) continue ;;
      cuda_elementwise_test | cuda_reduce_test | cuda_layer_norm_test | cuda_attention_test) continue ;;
      cuda_cross_entropy_test | cuda_optim_test) continue ;;
    esac
    (start=$SECONDS
     timeout "$limit" env LD_LIBRARY_PATH="$ldp" "$sanitizer" --tool racecheck --report-api-errors no \
       --error-exitcode 9 "$t" > "$work/racecheck.$n.log" 2>&1
     rc=$?
     case $rc in 0) verdict=clean ;; 9) verdict=HAZARDS ;; 124) verdict="not finished in $limit s" ;; *) verdict=FAILED ;; esac
     printf '%-26s exit %3s %4s s  %-10s %s\n' "$n" "$rc" "$((SECONDS - start))" "$verdict" \
       "$(grep -m1 -o 'RACECHECK SUMMARY.*' "$work/racecheck.$n.log")" > "$work/racecheck.$n.summary") &
  done
  wait
  cat "$work"/racecheck.*.summary
  ! grep -qE "HAZARDS|FAILED" "$work"/racecheck.*.summary
}
