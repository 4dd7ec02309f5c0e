#!/usr/bin/env bash
# //bench:sharding_memory end to end on the small GPT (d6) and 2 ranks: DDP, ZeRO-3 and TP hold
# their formulas between steps (1.00x), ZeRO-3 half of DDP, ZeRO-1 its f32 shard copies more
# (1.17x); the JSON line carries every row; a bad strategy is named.
# Argument: the sharding_memory binary.
set -u
bin="$1"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

out=$("$bin" --model d6 --seq-len 16 --nproc 2 --strategies ddp,zero1,zero3,tp 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || fail "exit $rc"
for s in DDP ZeRO-3 TP; do
  echo "$out" | grep -qE "^ +$s +2 \|.* 1\.00x \|" || fail "$s on 2 ranks does not hold its formula between steps"
done
echo "$out" | grep -qE '^ +ZeRO-1 +2 \|.* 1\.17x \|' || fail "ZeRO-1 on 2 ranks: not 1.17x its formula"
echo "$out" | grep -qE '^ +ZeRO-3 +2 \|.* 50\.0%$' || fail "ZeRO-3 on 2 ranks: not 50 % of DDP"
python3 -c 'import json,sys
j = json.loads([l for l in sys.argv[1].splitlines() if l.startswith("{")][-1])
r = {x["strategy"]: x for x in j["results"]}
assert sorted(r) == ["ddp", "tp", "zero1", "zero3"], r.keys()
assert all(x["peak_mib"] >= x["at_rest_mib"] * 0.99 for x in r.values()), r
assert abs(r["zero3"]["at_rest_vs_ddp"] - 0.5) < 0.01, r["zero3"]' "$out" || fail "the JSON line"

err=$("$bin" --strategies zero4 2>&1)
rc=$?
[ "$rc" -eq 1 ] && [[ "$err" == *"'zero4'"* ]] || fail "bad strategy: exit $rc, $err"

err=$("$bin" --nproc 1 2>&1)
rc=$?
[ "$rc" -eq 2 ] && [[ "$err" == *"--nproc"* ]] || fail "--nproc 1: exit $rc, $err"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all ok"
