#!/usr/bin/env bash
# One GPU session's checks, in priority order, on a GPU host without Bazel:
#   tools/gpu_session.sh BUNDLE_DIR OUT_DIR
# BUNDLE_DIR is the unpacked //release:gpu_bundle (the binaries); the Python scripts are this
# checkout's (bench/, tools/); PyTorch is the host's ($PYTHON, else /opt/torch/.venv/bin/python3,
# else python3). Sections, each under its own time budget (seconds, $KILN_SESSION_BUDGETS
# overrides: "tests=120 gpt=230"; 0: what is left), none started once the whole run passes
# $KILN_SESSION_TOTAL_S (default 500):
#   tests      every CUDA test (run_gpu_tests.sh); a failure stops the benchmarks (the figures of
#              a backend that computes wrong results mean nothing);
#   gpt        GPT-2 124M, batch 16 x 1024, bf16 autocast, fused AdamW: Kiln beside PyTorch eager
#              and torch.compile from the same weights (bench/gpt_gpu_vs_pytorch.py); when Kiln
#              misses its targets, one profiled Kiln run's op table;
#   attention  Kiln's fused attention beside F.scaled_dot_product_attention, bf16, causal,
#              T = 1024 and 4096, head dim 64, forward and forward+backward;
#   rows       the cuda_bench rows left open (sum over the first dim, broadcast add, sum over all,
#              softmax, fused AdamW, transposed copy) against a copy; an ncu line for each under
#              80 % of it while time remains;
#   nccl       reduce-scatter and all-gather with 2 ranks on the one GPU, Kiln beside PyTorch;
#   racecheck  compute-sanitizer racecheck over the CUDA test binaries not yet raced, in
#              parallel, until the total runs out (last: it is the longest).
# OUT_DIR gets session.json (every section's status, seconds and figures; rewritten before and
# after each section, so a run killed at any point leaves it complete up to there), gpt.json (the
# GPT comparison, rewritten after each run), session.log (everything printed) and logs.tar.gz
# (each section's logs). Exit status 0 only when every section passed.
set -u
if [ "${1:-}" = --section ]; then
  # One section, run by the driver below under `timeout` (so a budget cuts it wherever it is).
  section=$2
  . "$(dirname "${BASH_SOURCE[0]}")/gpu_session_sections.sh"
  "section_$section"
  exit $?
fi

B=$(cd "${1:?bundle dir}" && pwd)
OUT=${2:?out dir}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/kiln_gpu_session.XXXXXX")
total=${KILN_SESSION_TOTAL_S:-500}
declare -A budget=([tests]=120 [gpt]=230 [attention]=40 [rows]=50 [nccl]=40 [racecheck]=0)
for kv in ${KILN_SESSION_BUDGETS:-}; do budget[${kv%%=*}]=${kv#*=}; done
order=(tests gpt attention rows nccl racecheck)
export B OUT repo work
exec > >(tee -a "$OUT/session.log") 2>&1

# The session's JSON from the per-section status files in $work/status/ (NAME: status seconds
# budget note) and figures in $work/NAME.json, in section order; written to a temporary name and
# renamed.
mkdir -p "$work/status"
write_json() {
  python3 - "$work" "$OUT/session.json" "$total" "$SECONDS" "${order[@]}" <<'EOF'
import json, os, sys
work, path, total, elapsed, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5:]
out = {"total_budget_s": total, "elapsed_s": elapsed, "sections": []}
for n in names:
    s = {"name": n, "status": "not run"}
    try:
        status, seconds, budget, note = (open(os.path.join(work, "status", n)).read().rstrip("\n").split(" ", 3) + [""])[:4]
        s.update(status=status, seconds=int(seconds), budget_s=int(budget), note=note)
    except OSError:
        pass
    try:  # the GPT comparison's summary from gpt.json beside this file, which it rewrites itself
        s["results"] = json.load(open(os.path.join(work, n + ".json") if n != "gpt" else
                                      os.path.join(os.path.dirname(path), "gpt.json")))
        if n == "gpt":
            s["results"] = {k: s["results"].get(k) for k in ("summary", "errors", "cut")}
    except (OSError, ValueError):
        pass
    out["sections"].append(s)
with open(path + ".tmp", "w") as f:
    json.dump(out, f, indent=1)
    f.write("\n")
os.replace(path + ".tmp", path)
EOF
  tar -C "$work" -czf "$OUT/logs.tar.gz.tmp" --exclude='*.safetensors' --exclude=corpus.txt --exclude=status . 2>/dev/null &&
    mv "$OUT/logs.tar.gz.tmp" "$OUT/logs.tar.gz"
}
status() { echo "$2 $3 $4 ${5:-}" > "$work/status/$1"; }

echo "gpu_session: bundle $B, out $OUT, total budget $total s"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv,noheader
write_json
stop_reason=""
failed=0
for name in "${order[@]}"; do
  left=$((total - SECONDS))
  if [ -n "$stop_reason" ]; then
    status "$name" skipped 0 0 "$stop_reason"
    continue
  fi
  if ((left < 10)); then
    status "$name" skipped 0 0 "the total of $total s was reached"
    failed=1
    continue
  fi
  b=${budget[$name]}
  ((b <= 0 || b > left)) && b=$left
  echo
  echo "######## $name (budget $b s, at $SECONDS s of $total)"
  status "$name" running 0 "$b"
  write_json
  start=$SECONDS
  KILN_SECTION_BUDGET=$b timeout -k 5 "$b" bash "${BASH_SOURCE[0]}" --section "$name" 2>&1 | tee "$work/$name.log"
  rc=${PIPESTATUS[0]}
  took=$((SECONDS - start))
  case $rc in
    0) status "$name" ok "$took" "$b" ;;
    124 | 137) status "$name" cut "$took" "$b" "over its budget of $b s: cut there"; failed=1 ;;
    *) status "$name" failed "$took" "$b" "exit $rc: $(tail -1 "$work/$name.log")"; failed=1 ;;
  esac
  echo "######## $name: $(cut -d' ' -f1 "$work/status/$name") in $took s"
  [ "$name" = tests ] && [ "$rc" != 0 ] && stop_reason="a CUDA test failed or was cut: no benchmarks on a backend not shown correct"
  write_json
done
write_json
echo
echo "######## summary ($SECONDS s)"
for name in "${order[@]}"; do printf '%-10s %s\n' "$name" "$(cat "$work/status/$name")"; done
[ -f "$OUT/gpt.json" ] && python3 "$repo/bench/gpt_gpu_vs_pytorch.py" --print-summary "$OUT/gpt.json"
rm -rf "$work"
exit "$failed"
