#!/usr/bin/env bash
# //bench:scaling_model end to end: it recovers α and B from all-reduce, reduce-scatter and
# all-gather lines made from known values, predicts DDP and ZeRO-1 lines against measured ones
# (with compute it times itself, and with the compute a ddp_bench line gives: the formula's
# value), prints the 8-512 GPU projection and the 8-1,024 H100 one past data parallel, and refuses bad input with a message naming it;
# ddp_bench's lines carry the compute the model needs.
# Arguments: the scaling_model and ddp_bench binaries.
set -u
model="$1"
ddp_bench="$2"
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
        for op in ("reduce_scatter", "allgather"):  # ZeRO-1's collectives: n-1 ring steps
            res = [{"bytes": r["bytes"], "us": ((n - 1) * 50e-6 + (n - 1) / n * r["bytes"] / 1e9) * 1e6} for r in res]
            f.write(json.dumps({"benchmark": "allreduce", "op": op, "backend": "gloo", "ranks": n, "link": "test",
                                "results": res}) + "\n")
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
  for op in allreduce reduce_scatter allgather; do
    echo "$out" | grep -qE "^ +$n +test +$op +50\.0 +1\.0000 +0%$" ||
      fail "the $n-rank $op fit is not α 50 us, B 1 GB/s, 0% error"
  done
done
echo "$out" | grep -qE '^ +2 +test +mlp +10\.00 ' || fail "no prediction for the 2-rank mlp line"
echo "$out" | grep -qE '^ +cnn +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9]+% \| .*\(timed here\)$' || fail "no one-rank cnn profile timed here"
echo "$out" | grep -qE '^ +2 +test +mlp +10\.00 \| +[0-9.]+ +[-+][0-9]+% \| +- +\| +- ' ||
  fail "a DDP line without compute has a prediction at n ranks"

# ddp_bench's compute mode: a 2-rank run's lines carry the model alone, every rank at once
# (--allow-load: a loaded test machine must not make it refuse).
line=$("$ddp_bench" --nproc 2 --steps 1 --blocks 1 --allow-load 2>&1 | grep '^{')
python3 -c 'import json,sys; j=json.loads(sys.argv[1]); r={x["model"]: x for x in j["results"]}
assert sorted(r) == ["cnn", "mlp", "wide_mlp"], r.keys()
c=r["wide_mlp"]["compute"]; assert c["backward_ms"] > 0 and len(c["buckets"]) >= 2, c
assert 0 < c["cpu_ms"] < 1.5 * (c["forward_ms"] + c["backward_ms"] + c["optimizer_ms"]), c
assert all(0 < b["ready_ms"] <= c["backward_ms"] * 1.0001 for b in c["buckets"]), c' "$line" ||
  fail "ddp_bench --nproc 2: no compute profile in $line"

# Given compute: forward 1, backward 4, optimizer 1 ms alone (the 1-rank line) and 2, 8, 2 ms at 2
# ranks, one 1 MB bucket ready at the end of backward; on 2 ranks at α 50 us, B 1 GB/s its
# all-reduce takes 0.1 + 1 ms, all exposed: 7.10 ms stretched (x1 on 2 cores), 13.10 at 2 ranks,
# and 14.10 with DDP's overhead of the 1-rank line (7 ms measured, 6 of compute).
python3 - "$dir/ddp_c.jsonl" <<'PY'
import json, sys
def line(ranks, fwd, bwd, opt, measured):
    c = {"forward_ms": fwd, "backward_ms": bwd, "optimizer_ms": opt, "buckets": [{"ready_ms": bwd, "bytes": 1e6}]}
    if ranks == 1: c["cpu_ms"] = 3.0  # half the 6 ms of wall time: "50%" on cpu
    r = {"model": "mlp", "overlap_step_ms": measured, "after_backward_step_ms": 12.0, "after_backward_comm_ms": 2.0,
         "compute": c, "zero_step_ms": 6.5 if ranks == 1 else 12.0}
    return json.dumps({"benchmark": "ddp", "ranks": ranks, "link": "test", "results": [r]})
with open(sys.argv[1], "w") as f:
    f.write(line(1, 1, 4, 1, 7.0) + "\n" + line(2, 2, 8, 2, 10.0) + "\n")
PY
out=$("$model" --allreduce "$dir/ar_only.jsonl" --ddp "$dir/ddp_c.jsonl" --cores 2 2>&1)
rc=$?
echo "$out"
[ "$rc" -eq 0 ] || fail "given compute: exit $rc"
echo "$out" | grep -qE '^ +mlp +1\.00 +4\.00 +1\.00 +50% \| 1\.0@4\.0 \(the 1-rank ddp_bench line\)$' ||
  fail "given compute: the 1-rank line's compute was not used"
echo "$out" | grep -qE '^ +2 +test +mlp +10\.00 \| +7\.10 +-29% \| +13\.10 +\+31% \| +14\.10 +\+41% \| +2\.00x +- +- \|' ||
  fail "given compute: the 2-rank mlp line is not 7.10 (stretched), 13.10 (at 2 ranks), x2.00"
echo "$out" | grep -q "within 15 %: 1 of 2 (1-rank profile stretched), 1 of 2 (compute at n ranks), 0 of 1 (+ overhead" ||
  fail "given compute: the within-15 % summary"

# ZeRO-1 on the same compute: on 2 ranks each 1 MB reduce-scatter or all-gather takes 0.05 + 0.5
# ms; the one bucket's reduce-scatter is all exposed, the optimizer steps half (1 ms), then the
# all-gather: 2 + 8 + 1 + 0.55 + 0.55 = 12.10 ms, and 12.60 with ZeRO's overhead of the 1-rank
# line (6.5 ms measured, 6 of compute).
echo "$out" | grep -qE '^ +2 +test +mlp +12\.00 \| +12\.10 +\+1% \| +12\.60 +\+5% \| +10\.00$' ||
  fail "given compute: the 2-rank ZeRO line is not 12.10 (at 2 ranks), 12.60 (+ overhead) beside DDP's 10.00"
echo "$out" | grep -qE '^ +1 +test +mlp +6\.50 \| +6\.00 +-8% \| +- +\| +7\.00$' ||
  fail "given compute: the 1-rank ZeRO line"
echo "$out" | grep -q "within 15 %: 2 of 2 (compute at n ranks), 1 of 1 (+ overhead, n > 1)" ||
  fail "given compute: the ZeRO within-15 % summary"

rows=$(echo "$out" | grep -cE '(ResNet-50|GPT-2 124M).* (8|16|32|64|128|256|512) ')
[ "$rows" -eq 14 ] || fail "projection has $rows rows, want 14"
eff=$(echo "$out" | grep -E 'ResNet-50.* 512 ' | grep -oE '[0-9.]+%' | head -1 | tr -d %)
awk -v e="$eff" 'BEGIN { exit !(e > 50 && e <= 100) }' || fail "ResNet-50 at 512 GPUs: efficiency '$eff'"
zero=$(echo "$out" | grep -E 'ResNet-50.* 512 ' | grep -oE '[0-9.]+%$' | tr -d %)
awk -v e="$eff" -v z="$zero" 'BEGIN { exit !(z > 0 && z < e) }' ||
  fail "ResNet-50 at 512 GPUs: ZeRO-1 efficiency '$zero' (its all-gather is not overlapped: below DDP's $eff)"

# Past data parallel: 2 models x 8 sizes (8-1,024) x 3 layouts; MFU never above the kernels' 60 %;
# the 7B model's DDP state (16 bytes x 6.7e9) does not fit 80 GB, FSDP's does; Megatron beside it.
sharded=$(echo "$out" | grep -E '^ +(GPT-2 1\.5B|7B) +(8|16|32|64|128|256|512|1024) +(DDP|FSDP|TP 8 x FSDP) ')
rows=$(echo "$sharded" | grep -c .)
[ "$rows" -eq 48 ] || fail "sharded projection has $rows rows, want 48"
echo "$sharded" | awk '{ m = $(NF-2); sub("%", "", m); if (m + 0 <= 0 || m + 0 > 60.0001) bad = 1 } END { exit bad }' ||
  fail "an MFU outside (0, 60 %]"
echo "$sharded" | grep -qE '^ +7B +64 +DDP .* 107\.2 +no$' || fail "7B DDP on 64 GPUs: 107.2 GB of state, not fitting"
echo "$sharded" | grep -qE '^ +7B +64 +FSDP .* 1\.7 +yes$' || fail "7B FSDP on 64 GPUs: 1.7 GB of state"
echo "$sharded" | grep -qE '^ +GPT-2 1\.5B +8 +TP 8 x FSDP +[0-9.]+ +[1-9][0-9.]+ +0\.0 ' ||
  fail "GPT-2 1.5B TP 8 on one node: tensor-parallel time and no data-parallel time"
echo "$out" | grep -q "1T on 3,072 GPUs 52 %" || fail "no Megatron-LM figures beside the projection"

err=$("$model" --allreduce "$dir/missing.jsonl" 2>&1)
rc=$?
[ "$rc" -eq 1 ] && [[ "$err" == *"cannot read '$dir/missing.jsonl'"* ]] || fail "missing file: exit $rc, $err"
echo '{"ranks": 2, "results": [{"bytes": 65536, "us": 5}]}' >"$dir/one_point.jsonl"
err=$("$model" --allreduce "$dir/one_point.jsonl" 2>&1)
rc=$?
[ "$rc" -eq 1 ] && [[ "$err" == *"fit allreduce: 1 points"* ]] || fail "one point: exit $rc, $err"
err=$("$model" --cores 0 2>&1)
rc=$?
[ "$rc" -eq 2 ] && [[ "$err" == *"--cores"* ]] || fail "--cores 0: exit $rc, $err"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all ok"
