#!/usr/bin/env bash
# tools/gpu_session.sh on a fake bundle and a fake GPU host (no GPU needed): the sections run in
# order and their figures reach session.json and gpt.json; the GPT comparison's ratios, MFU and
# loss agreement come out of the runs' step times and losses; a missed speed target brings the
# profiled run; a section over its budget is cut, reported, and the JSON is still complete; past
# the total budget the rest is skipped; a failing CUDA test stops the benchmarks; a host without
# PyTorch fails the comparisons instead of skipping them.
# Arguments: tools/gpu_session.sh (its siblings gpu_session_sections.sh, gpu_env.sh and
# ncu_summary.py, and bench/gpt_gpu_vs_pytorch.py, are found beside it in the runfiles).
set -uo pipefail
session=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
tmp=${TEST_TMPDIR:-$(mktemp -d)}/gpu_session_case
rm -rf "$tmp" && mkdir -p "$tmp"
passes=0 failures=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; passes=$((passes + 1)); else echo "FAIL: $1"; failures=$((failures + 1)); fi
}
has() { grep -q -- "$2" "$1"; }
# jq-like: the Python expression $2 over the JSON file $1 (as j) is true.
json_is() { python3 -c "import json, sys; j = json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"; }

B=$tmp/bundle
mkdir -p "$B"/{tests,bench,bin,lib} "$tmp/fakebin"
fake() {  # fake PATH BODY: an executable bash script
  printf '#!/usr/bin/env bash\n%s\n' "$2" > "$1"
  chmod +x "$1"
}
fake "$B/run_gpu_tests.sh" 'echo "---- fake_test passed (0 s)"; [ -n "${FAKE_TEST_FAIL:-}" ] && { echo "---- bad_test FAILED (exit 1, 0 s)"; echo "1 passed, 1 failed"; exit 1; }; echo "1 passed, 0 failed"'
fake "$B/tests/fake_test" 'exit 0'
# Kiln's GPT: 100 ms steps after a slow first one, losses 10.8 -> 6.0; the profiled run prints a table.
fake "$B/bin/gpt" 'if [[ " $* " == *" --profile "* ]]; then echo "profiler: 10 events over 3 active steps"; echo "fake_kernel 1.0 ms"; exit 0; fi
sleep "${FAKE_GPT_SLEEP:-0}"
echo "{\"model\": \"hf\", \"n_layer\": 12, \"n_head\": 12, \"n_embd\": 768, \"block_size\": 1024, \"params\": 124475904, \"peak_device_mb\": 30000.0, \"step_ms\": [900, 100, 100, 100, 100, 100, 100, 100], \"step_losses\": [10.80, 10, 9, 8, 7.5, 7, 6.5, 6.004]}"'
fake "$B/bench/attention_bench" 'sleep "${FAKE_ATTENTION_SLEEP:-0}"; echo "attention on cuda"; echo "{\"bench\": \"attention\", \"dtype\": \"bf16\", \"B\": 4, \"H\": 12, \"D\": 64, \"rows\": []}"'
fake "$B/bench/cuda_bench" 'echo "device: fake"; echo "op                                 ms       GB/s    of roof"; echo "sum f32 (all)                   0.100     3000.0        70%"; echo "{\"bench\": \"cuda_bench\", \"sum f32 (all) of roof\": 0.7, \"softmax f32 (rows 8192) of roof\": 0.9}"'
fake "$B/bench/allreduce_bench" 'if [ "$RANK" = 0 ]; then echo "    1024 10.0 0.100 0.050"; echo "{\"results\": [{\"bytes\": 1024, \"us\": 10.0}]}"; fi'
# The host's PyTorch: answers the torch query (or not, FAKE_NO_TORCH) and plays the PyTorch scripts:
# eager 150 ms steps, compile 90 ms, the same losses as Kiln's to within 0.004.
cat > "$tmp/fakebin/torch_python" <<'PY'
#!/usr/bin/env bash
if [ "$1" = -c ]; then [ -z "${FAKE_NO_TORCH:-}" ]; exit; fi
script=$(basename "$1")
shift
case $script in
  gpt_pytorch.py)
    if [[ " $* " == *" --write-hf-init "* ]]; then
      d=${*##*--write-hf-init }; mkdir -p "${d%% *}"; echo '{"wrote": "x", "params": 124475904}'; exit 0
    fi
    ms=150; [[ " $* " == *" --compile "* ]] && ms=90
    echo "{\"framework\": \"pytorch\", \"n_layer\": 12, \"n_head\": 12, \"n_embd\": 768, \"block_size\": 1024, \"params\": 124475904, \"peak_device_mb\": 40000.0, \"step_ms\": [5000, $ms, $ms, $ms, $ms, $ms, $ms, $ms], \"step_losses\": [10.80, 10, 9, 8, 7.5, 7, 6.5, 6.0]}" ;;
  attention_gpu_vs_pytorch.py) echo "T fwd ms"; echo '{"bench": "attention_vs_pytorch", "rows": []}' ;;
  allreduce_pytorch.py) if [ "$RANK" = 0 ]; then echo "    1024 12.0 0.080 0.040"; echo '{"results": [{"bytes": 1024, "us": 12.0}]}'; fi ;;
  *) echo "unexpected script $script"; exit 3 ;;
esac
PY
chmod +x "$tmp/fakebin/torch_python"
# The CUDA tools: ncu profiles nothing; compute-sanitizer runs the binary and finds no hazard.
fake "$tmp/fakebin/ncu" 'exit 0'
fake "$tmp/fakebin/compute-sanitizer" 'while [[ $1 == --* ]]; do shift 2; done; "$@" && echo "========= RACECHECK SUMMARY: 0 hazards displayed"'
fake "$tmp/fakebin/nvidia-smi" 'echo "Fake GPU, 1.0, 1 MiB, 1 MHz"'

run_session() {  # run_session NAME [ENV=VALUE...]: the session into $tmp/NAME, its output in $tmp/NAME.log
  local name=$1
  shift
  env PATH="$tmp/fakebin:$PATH" CUDA_PATH="$tmp/nocuda" PYTHON="$tmp/fakebin/torch_python" KILN_GPT_ROUNDS=1 \
    KILN_SESSION_BUDGETS="tests=20 gpt=30 attention=10 rows=10 nccl=10 racecheck=10" "$@" \
    bash "$session" "$B" "$tmp/$name" > "$tmp/$name.log" 2>&1
  echo $? > "$tmp/$name.rc"
}

# 1. Everything passes: sections in order, figures in the JSON, the ratios right.
run_session all
check "a clean session exits 0" [ "$(cat "$tmp/all.rc")" = 0 ]
check "the sections run in the issue's order" bash -c "grep -o '^######## [a-z]* (budget' '$tmp/all.log' | awk '{print \$2}' | paste -sd' ' | grep -qx 'tests gpt attention rows nccl racecheck'"
j=$tmp/all/session.json
check "session.json lists every section as ok" json_is "$j" '[s["status"] for s in j["sections"]] == ["ok"] * 6'
check "session.json carries the tests' count" json_is "$j" 'j["sections"][0]["results"]["passed"] == 1'
check "session.json carries the GPT summary" json_is "$j" 'abs(j["sections"][1]["results"]["summary"]["kiln_vs_eager"] - 1.5) < 1e-9'
g=$tmp/all/gpt.json
check "gpt.json: one run per framework" json_is "$g" 'sorted(r["framework"] for r in j["runs"]) == ["compile", "eager", "kiln"]'
check "gpt.json: Kiln's timed steps leave the 5 warm-up steps out (100 ms)" json_is "$g" 'abs(j["summary"]["kiln"]["step_ms"] - 100) < 1e-9'
check "gpt.json: Kiln vs eager is 150/100" json_is "$g" 'abs(j["summary"]["kiln_vs_eager"] - 1.5) < 1e-9'
check "gpt.json: Kiln vs compile is 90/100" json_is "$g" 'abs(j["summary"]["kiln_vs_compile"] - 0.9) < 1e-9'
check "gpt.json: MFU from 6N + 12LTC over 989 TFLOP/s" json_is "$g" \
  'abs(j["summary"]["kiln"]["mfu"] - 16384 / 0.1 * (6 * (124475904 - 1024 * 768) + 12 * 12 * 1024 * 768) / 989e12) < 1e-9'
check "gpt.json: the last losses agree within 1e-2" json_is "$g" 'j["summary"]["losses_agree_vs_eager"] and abs(j["summary"]["loss_diff_vs_eager"] - 0.004) < 1e-9'
check "gpt.json: memory ratio against eager" json_is "$g" 'abs(j["summary"]["kiln_memory_vs_eager"] - 0.75) < 1e-9'
check "a missed target (0.9x compile) brings the profiled run" has "$tmp/all.log" "profiler: 10 events"
check "the summary table ends the output" has "$tmp/all.log" "kiln vs compile: x0.90"
check "the logs come back as one archive" bash -c "tar -tzf '$tmp/all/logs.tar.gz' | grep -q gpt_runs.log"

# 2. A section over its budget is cut and reported; the sections after it still run.
run_session cut FAKE_ATTENTION_SLEEP=30
j=$tmp/cut/session.json
check "a cut section fails the session" [ "$(cat "$tmp/cut.rc")" != 0 ]
check "the attention section is reported cut" json_is "$j" 'j["sections"][2]["status"] == "cut" and "budget" in j["sections"][2]["note"]'
check "the cut took about its budget" json_is "$j" '9 <= j["sections"][2]["seconds"] <= 20'
check "the sections after the cut still ran" json_is "$j" '[s["status"] for s in j["sections"][3:]] == ["ok"] * 3'

# 3. Past the total budget, the rest is skipped (and the JSON says so).
run_session total KILN_SESSION_TOTAL_S=15 FAKE_GPT_SLEEP=30
j=$tmp/total/session.json
check "the GPT section, cut by the total, kept the runs it finished" json_is "$tmp/total/gpt.json" 'j["errors"] or j.get("cut") or len(j["runs"]) < 3'
check "sections past the total are skipped" json_is "$j" '[s["status"] for s in j["sections"][2:]] == ["skipped"] * 4'

# 4. A failing CUDA test stops the benchmarks.
run_session testfail FAKE_TEST_FAIL=1
j=$tmp/testfail/session.json
check "a failing test fails the session" [ "$(cat "$tmp/testfail.rc")" != 0 ]
check "the tests section failed, naming the test" json_is "$j" 'j["sections"][0]["status"] == "failed" and j["sections"][0]["results"]["tests"]["bad_test"] == "FAILED"'
check "no benchmark ran after it" json_is "$j" 'all(s["status"] == "skipped" and "test failed" in s["note"] for s in j["sections"][1:])'

# 5. No PyTorch: the comparisons fail, they are not skipped.
run_session notorch FAKE_NO_TORCH=1
j=$tmp/notorch/session.json
check "no PyTorch fails the session" [ "$(cat "$tmp/notorch.rc")" != 0 ]
check "the GPT, attention and NCCL sections fail without PyTorch" \
  json_is "$j" '[j["sections"][i]["status"] for i in (1, 2, 4)] == ["failed"] * 3 and "no PyTorch" in j["sections"][1]["note"]'

echo "$passes passed, $failures failed"
[ "$failures" = 0 ]
