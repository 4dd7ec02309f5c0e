#!/usr/bin/env bash
# The main job's observability flags under the launcher (2 DDP ranks): --profile writes a Chrome
# trace per rank whose communication tracks hold the same all-reduces, and prints the op table;
# the breakdown line reports exposed communication and how much was hidden; --logdir writes
# one TensorBoard file (rank 0 only); the JSON line has the peak memory; SIGUSR1 makes a rank
# dump its flight recorder.
set -u
launch="$1"
mnist="$2"
dir="${TEST_TMPDIR:-/tmp}/mnist_obs"
rm -rf "$dir" && mkdir -p "$dir"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The first 3000 training and 1000 test images: each rank reads 3 MB, not the whole data set.
python3 "$(dirname "$0")/../fashion_mnist_subset.py" "$dir/data" 3000 1000 || fail "no Fashion-MNIST subset"
out=$(KILN_FLIGHT_RECORDER_DIR="$dir/fr" "$launch" --nproc-per-node 2 -- "$mnist" --ddp --model mlp --epochs 1 \
      --limit-train 3000 --log-every 5 --threads 1 --data-dir "$dir/data" --profile "$dir/prof" --profile-steps 1,1,3 \
      --logdir "$dir/tb" 2>&1)
code=$?
echo "$out"
[ "$code" -eq 0 ] || fail "profiled DDP run exited $code"
[[ "$out" == *"Self CPU time total"* ]] || fail "no key_averages table printed"
[[ "$out" == *"breakdown per step: data "*" exposed comm "*"% hidden behind backward"* ]] || fail "no DDP breakdown line"
[[ "$out" == *"MFU "* ]] || fail "no MFU on CPU"
[[ "$out" =~ \"peak_memory_bytes\":[1-9] ]] || fail "no peak memory in the JSON line"
for r in 0 1; do [ -f "$dir/prof/trace.rank$r.json" ] || fail "no trace for rank $r"; done
python3 - "$dir/prof" <<'PY' || fail "the traces do not hold the same all-reduces"
import json, sys
seqs = []
for r in (0, 1):
    doc = json.load(open(f"{sys.argv[1]}/trace.rank{r}.json"))
    names = [e for e in doc["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_name"]
    assert names and names[0]["args"]["name"] == f"rank {r}", names
    s = sorted(e["args"]["seq"] for e in doc["traceEvents"] if e.get("cat") == "collective")
    assert len(s) >= 3, f"rank {r}: {len(s)} collectives"
    seqs.append(s)
assert seqs[0] == seqs[1], seqs
print("traces ok:", len(seqs[0]), "collectives on each rank")
PY
n=$(ls "$dir/tb" | grep -c tfevents)
[ "$n" -eq 1 ] || fail "want exactly one TensorBoard file (rank 0 only), found $n"

# Pipeline stages: sends and receives on their own tracks of each rank's trace.
out=$("$launch" --nproc-per-node 2 -- "$mnist" --pipeline-stages 2 --micro-batches 4 --epochs 1 --limit-train 1280 \
      --threads 1 --log-every 5 --data-dir "$dir/data" --profile "$dir/pp" --profile-steps 1,1,2 2>&1)
[ $? -eq 0 ] || fail "profiled pipeline run failed: $out"
[[ "$out" == *"fwd+bwd (pipeline)"* ]] || fail "no pipeline breakdown line"
python3 - "$dir/pp" <<'PY' || fail "the pipeline traces lack send/receive tracks"
import json, sys
for r in (0, 1):
    doc = json.load(open(f"{sys.argv[1]}/trace.rank{r}.json"))
    rows = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name"}
    p2p = [e for e in doc["traceEvents"] if e.get("cat") == "p2p"]
    assert {"p2p send", "p2p recv"} <= set(rows.values()), rows
    assert p2p and all(rows[e["tid"]].startswith("p2p " + e["name"]) for e in p2p), "p2p events off their tracks"
print("pipeline traces ok")
PY

# A single process too: the table and the trace.
out=$("$mnist" --model mlp --epochs 1 --limit-train 1000 --threads 1 --data-dir "$dir/data" --profile "$dir/one" \
      --profile-steps 0,1,2 2>&1)
[ $? -eq 0 ] || fail "profiled single-process run failed: $out"
[ -f "$dir/one/trace.rank0.json" ] || fail "no single-process trace"
[[ "$out" == *"LinearBackward"* ]] || fail "the table has no backward nodes: $out"
[[ "$out" == *"Kiln memory summary"*"cpu allocated"* ]] || fail "no memory summary after the table: $out"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all ok"
