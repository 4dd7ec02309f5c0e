#!/usr/bin/env bash
# //bench:scaling_model end to end: it recovers α and B from an all-reduce file made from known
# values, predicts a DDP line against a measured one, prints the 8-512 GPU projection, and
# refuses bad input with a message naming it. Argument: the scaling_model binary.
set -u
model="$1"
dir="${TEST_TMPDIR:-/tmp}/scaling_model_$$"
mkdir -p "$dir"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# allreduce_bench lines for 2 and 4 ranks with α = 50 µs, B = 1 GB/s, exactly.
python3 - "$dir/ar.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for n in (2, 4):
        res = []
        b = 4
        while b <= 16 << 20:
            t = 2 * (n - 1) * 50e-6 + 2 * (n - 1) / n * b / 1e9
            res.append({"bytes": b, "us": t * 1e6})
            b *= 4
        f.write(json.dumps({"benchmark": "allreduce", "backend": "gloo", "ranks": n, "link": "test", "results": res}) + "\n")
    f.write(json.dumps({"benchmark": "ddp", "ranks": 2, "link": "test", "results": [
        {"model": "mlp", "overlap_step_ms": 10.0, "after_backward_step_ms": 12.0, "after_backward_comm_ms": 2.0}]}) + "\n")
PY
grep '"ddp"' "$dir/ar.jsonl" >"$dir/ddp.jsonl"
grep -v '"ddp"' "$dir/ar.jsonl" >"$dir/ar_only.jsonl"
out=$("$model" --allreduce "$dir/ar_only.jsonl" --ddp "$dir/ddp.jsonl" --steps 2 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || fail "exit $rc"
for n in 2 4; do
  echo "$out" | grep -qE "^ +$n +test +50\.0 +1\.0000 +0%$" || fail "the $n-rank fit is not α 50 us, B 1 GB/s, 0% error"
done
echo "$out" | grep -qE '^ +2 +test +mlp +10\.00 ' || fail "no prediction for the 2-rank mlp line"
rows=$(echo "$out" | grep -cE '(ResNet-50|GPT-2 124M).* (8|16|32|64|128|256|512) ')
[ "$rows" -eq 14 ] || fail "projection has $rows rows, want 14"
eff=$(echo "$out" | grep -E 'ResNet-50.* 512 ' | grep -oE '[0-9.]+%$' | tr -d %)
awk -v e="$eff" 'BEGIN { exit !(e > 50 && e <= 100) }' || fail "ResNet-50 at 512 GPUs: efficiency '$eff'"

err=$("$model" --allreduce "$dir/missing.jsonl" 2>&1)
rc=$?
[ "$rc" -eq 1 ] && [[ "$err" == *"cannot read '$dir/missing.jsonl'"* ]] || fail "missing file: exit $rc, $err"
echo '{"ranks": 2, "results": [{"bytes": 65536, "us": 5}]}' >"$dir/one_point.jsonl"
err=$("$model" --allreduce "$dir/one_point.jsonl" 2>&1)
rc=$?
[ "$rc" -eq 1 ] && [[ "$err" == *"fit_allreduce: 1 points"* ]] || fail "one point: exit $rc, $err"
err=$("$model" --cores 0 2>&1)
rc=$?
[ "$rc" -eq 2 ] && [[ "$err" == *"--cores"* ]] || fail "--cores 0: exit $rc, $err"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all ok"
