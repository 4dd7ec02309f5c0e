#!/usr/bin/env bash
# pipeline_vs_pytorch.py --rounds 3 on fake benchmarks (nothing is measured): Kiln and PyTorch run
# alternately; each row's step time is the median over the rounds and its speed-up the median of
# the rounds' ratios (not the ratio of the medians), with their range; a row PyTorch refuses keeps
# its error and no speed-up. --allow-load (this machine may be loaded) goes down to Kiln's
# benchmark, the result carries the host, and a round whose benchmark found the machine loaded
# makes it "noisy" whatever the script's own check saw.
# Arguments: bench/pipeline_vs_pytorch.py.
set -u
script="$1"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export FAKE_DIR="$dir"

# Kiln's rounds: 10, 20, 40 ms at m = 4; PyTorch's: 12, 40, 60 ms. Ratios 1.2, 2.0, 1.5: median
# 1.5 (the ratio of the medians would be 40 / 20 = 2.0).
cat >"$dir/kiln" <<'EOF'
#!/usr/bin/env bash
n=$(($(cat "$FAKE_DIR/kiln_calls" 2>/dev/null || echo 0) + 1))
echo "$n" >"$FAKE_DIR/kiln_calls"
echo "kiln $n $*" >>"$FAKE_DIR/order"
ms=(0 10 20 40)
noisy=(false false true false)
echo "a table line"
echo "{\"benchmark\": \"pipeline\", \"noisy\": ${noisy[$n]}, \"results\": [{\"schedule\": \"1f1b\", \"virtual_stages\": 1, \"micro_batches\": 1, \"step_ms\": 5, \"bubble\": 0.5, \"ideal_bubble\": 0.5, \"model_bubble\": 0.5, \"replay_bubble\": 0.5}, {\"schedule\": \"1f1b\", \"virtual_stages\": 1, \"micro_batches\": 4, \"step_ms\": ${ms[$n]}, \"bubble\": 0.$n, \"ideal_bubble\": 0.2, \"model_bubble\": 0.2$n, \"replay_bubble\": 0.3$n}]}"
EOF
cat >"$dir/python" <<'EOF'
#!/usr/bin/env bash
if [ "$1" = -c ]; then echo "0.0-fake"; exit 0; fi
n=$(($(cat "$FAKE_DIR/torch_calls" 2>/dev/null || echo 0) + 1))
echo "$n" >"$FAKE_DIR/torch_calls"
echo "torch $n" >>"$FAKE_DIR/order"
ms=(0 12 40 60)
echo "{\"benchmark\": \"pytorch_pipeline\", \"results\": [{\"schedule\": \"1f1b\", \"micro_batches\": 1, \"step_ms\": null, \"error\": \"m < p\"}, {\"schedule\": \"1f1b\", \"micro_batches\": 4, \"step_ms\": ${ms[$n]}}]}"
EOF
chmod +x "$dir/kiln" "$dir/python"

out=$(KILN_TORCH_PYTHON="$dir/python" python3 "$script" --kiln-bin "$dir/kiln" --pytorch-script fake.py \
  --stages 2 --steps 3 --micro 1,4 --rounds 3 --allow-load 2>"$dir/stderr")
code=$?
echo "$out"
if [ "$code" -ne 0 ]; then
  echo "FAIL: exit $code"
  cat "$dir/stderr"
  exit 1
fi
printf '%s\n' "$out" | tail -1 >"$dir/result.json"
python3 - "$dir/result.json" "$dir/order" <<'EOF'
import json, sys
result = json.load(open(sys.argv[1]))
rows = {r["micro_batches"]: r for r in result["results"]}
order = [line.split()[0] + line.split()[1] for line in open(sys.argv[2])]
kiln_args = [line.split()[2:] for line in open(sys.argv[2]) if line.startswith("kiln")]
failures = []
def check(what, got, want):
    ok = abs(got - want) < 1e-9 if isinstance(want, float) and got is not None else got == want
    print(("ok: " if ok else "FAIL: ") + f"{what}: {got!r}" + ("" if ok else f", wanted {want!r}"))
    if not ok: failures.append(what)
check("alternating order", order, ["kiln1", "torch1", "kiln2", "torch2", "kiln3", "torch3"])
check("--allow-load passed to Kiln's benchmark", all("--allow-load" in a for a in kiln_args), True)
check("noisy: round 2's benchmark was", result["noisy"], True)
check("host fields", sorted(result["host"]), ["busy_cores", "cores", "cpu_model", "load_average_end",
                                              "load_average_start", "max_busy_cores"])
r = rows[4]
check("Kiln step: median over rounds", r["step_ms"], 20)
check("PyTorch step: median over rounds", r["pytorch_step_ms"], 40)
check("speed-up: median of the rounds' ratios", r["speedup"], 1.5)
check("lowest ratio", r["speedup_min"], 1.2)
check("highest ratio", r["speedup_max"], 2.0)
check("bubble: median over rounds", r["bubble"], 0.2)
check("model bubble: median over rounds", r["model_bubble"], 0.22)
check("replay bubble: median over rounds", r["replay_bubble"], 0.32)
check("every round's Kiln step", r["step_ms_rounds"], [10, 20, 40])
check("every round's PyTorch step", r["pytorch_step_ms_rounds"], [12, 40, 60])
check("refused row: no speed-up", rows[1]["speedup"], None)
check("refused row: PyTorch's error", rows[1]["pytorch_error"], "m < p")
sys.exit(1 if failures else 0)
EOF
[ $? -eq 0 ] || exit 1

err=$(python3 "$script" --kiln-bin "$dir/kiln" --pytorch-script fake.py --rounds 0 2>&1 >/dev/null)
code=$?
if [ "$code" -ne 2 ] || [[ "$err" != *"--rounds: must be at least 1, got 0"* ]]; then
  echo "FAIL: --rounds 0 -> exit $code, stderr: $err"
  exit 1
fi
echo "ok: --rounds 0 refused: ${err##*error: }"
