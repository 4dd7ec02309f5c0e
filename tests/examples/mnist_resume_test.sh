#!/usr/bin/env bash
# Long-run safety of the main job, with real processes and real signals: SIGTERM mid-epoch saves
# and exits 75 (one process and 2-rank DDP under the launcher), --resume then ends bit-identical to
# an uninterrupted run (the final checkpoint files are byte-equal: weights, optimizer, generator
# and position), and --timeout fails the job when a rank hangs (SIGSTOP).
set -u
launch="$1"
mnist="$2"
dir="${TEST_TMPDIR:-/tmp}/mnist_resume"
rm -rf "$dir" && mkdir -p "$dir"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The checkpoint's position: "epoch batch step".
position() {
  python3 - "$1" <<'PY'
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    m = json.loads(f.read(n))["__metadata__"]
print(m["kiln.epoch"], m["kiln.batch"], m["kiln.step"])
PY
}

# The pid of the launcher $1's child with RANK=$2, read from /proc (a minimal system has no ps):
# the launcher's children are listed under its threads' task/*/children. (Scanning every
# /proc/PID/stat for the parent took seconds on a loaded machine, long enough for the run to end
# before rank 1 was found.)
rank_pid() {
  local p
  for p in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2" && echo "$p" && return 0
  done
  return 1
}

# Waits (up to 60 s) until file $1 holds a line matching $2.
wait_for() {
  for _ in $(seq 6000); do
    grep -q -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.01
  done
  return 1
}

# 6400 images, batch 64: 100 steps per epoch (50 per rank under 2-rank DDP), 3 epochs; the first
# 6400 training and 1000 test images only, so each rank reads 6 MB, not the whole data set.
python3 "$(dirname "$0")/../fashion_mnist_subset.py" "$dir/data" 6400 1000 || fail "no Fashion-MNIST subset"
common=(--model mlp --dropout 0.1 --optimizer adam --epochs 3 --limit-train 6400 --batch-size 64 --threads 1
        --log-every 1 --data-dir "$dir/data")

# ---- one process: an uninterrupted reference, then SIGTERM at step ~20 and a resume.
"$mnist" "${common[@]}" --save "$dir/full.safetensors" > "$dir/full.log" 2>&1 || fail "reference run failed"

"$mnist" "${common[@]}" --save "$dir/part.safetensors" --save-every 1000 > "$dir/part.log" 2>&1 &
pid=$!
wait_for "$dir/part.log" "epoch 1 step 20/100" || fail "the run never reached step 20"
kill -TERM "$pid"
wait "$pid"
code=$?
cat "$dir/part.log" | tail -5
[ "$code" -eq 75 ] || fail "SIGTERM: exit status $code (want 75, preempted)"
grep -q "preempted: stopped after step" "$dir/part.log" || fail "no 'preempted' line"
read -r epoch batch step < <(position "$dir/part.safetensors")
echo "preempted at epoch $epoch batch $batch step $step"
[ "$batch" -gt 0 ] && [ "$batch" -lt 100 ] || fail "the checkpoint is not mid-epoch: epoch $epoch batch $batch"
"$mnist" "${common[@]}" --save "$dir/part.safetensors" --resume "$dir/part.safetensors" > "$dir/resume.log" 2>&1 \
  || fail "resume failed: $(tail -3 "$dir/resume.log")"
grep -q "resumed from $dir/part.safetensors at epoch $epoch batch $batch (step $step)" "$dir/resume.log" \
  || fail "no resume line"
cmp -s "$dir/full.safetensors" "$dir/part.safetensors" \
  || fail "one process: interrupted + resumed run differs from the uninterrupted one"

# ---- 2-rank DDP: SIGTERM to the launcher mid-epoch; every rank stops after the same step.
ddp=(--ddp "${common[@]}")
"$launch" --nproc-per-node 2 -- "$mnist" "${ddp[@]}" --save "$dir/dfull.safetensors" > "$dir/dfull.log" 2>&1 \
  || fail "DDP reference run failed: $(tail -3 "$dir/dfull.log")"
"$launch" --nproc-per-node 2 -- "$mnist" "${ddp[@]}" --save "$dir/dpart.safetensors" > "$dir/dpart.log" 2>&1 &
pid=$!
wait_for "$dir/dpart.log" "epoch 1 step 15/50" || fail "the DDP run never reached step 15"
kill -TERM "$pid"
wait "$pid"
code=$?
tail -4 "$dir/dpart.log"
[ "$code" -eq 75 ] || fail "DDP SIGTERM: launcher exit status $code (want 75)"
grep -q "every rank saved and stopped" "$dir/dpart.log" || fail "the launcher did not report the preemption"
read -r epoch batch step < <(position "$dir/dpart.safetensors")
echo "DDP preempted at epoch $epoch batch $batch step $step"
[ "$batch" -gt 0 ] && [ "$batch" -lt 50 ] || fail "the DDP checkpoint is not mid-epoch: epoch $epoch batch $batch"
"$launch" --nproc-per-node 2 -- "$mnist" "${ddp[@]}" --save "$dir/dpart.safetensors" --auto-resume \
  > "$dir/dresume.log" 2>&1 || fail "DDP resume failed: $(tail -3 "$dir/dresume.log")"
grep -q "resumed from $dir/dpart.safetensors at epoch $epoch batch $batch" "$dir/dresume.log" || fail "no DDP resume line"
cmp -s "$dir/dfull.safetensors" "$dir/dpart.safetensors" \
  || fail "2-rank DDP: interrupted + resumed run differs from the uninterrupted one"

# ---- elastic: SIGKILL rank 1 mid-run; --max-restarts 1 restarts both, they resume from the latest
# --save-every checkpoint, and the job ends with the same weights as the uninterrupted run.
"$launch" --nproc-per-node 2 --max-restarts 1 -- "$mnist" "${ddp[@]}" --save "$dir/elastic.safetensors" \
  --save-every 10 --auto-resume > "$dir/elastic.log" 2>&1 &
pid=$!
wait_for "$dir/elastic.log" "epoch 1 step 25/50" || fail "the elastic run never reached step 25"
rank1=$(rank_pid "$pid" 1)
[ -n "$rank1" ] && kill -KILL "$rank1"
wait "$pid"
code=$?
grep "launch:\|resumed" "$dir/elastic.log"
[ "$code" -eq 0 ] || fail "elastic: launcher exit status $code (want 0): $(tail -3 "$dir/elastic.log")"
grep -q "restarting all 2 ranks (restart 1 of 1) after: rank 1 (pid $rank1) was killed by signal 9" \
  "$dir/elastic.log" || fail "elastic: no restart line naming rank 1"
grep -q "\[rank 0\] resumed from $dir/elastic.safetensors at epoch" "$dir/elastic.log" \
  || fail "elastic: the restarted group did not resume"
cmp -s "$dir/dfull.safetensors" "$dir/elastic.safetensors" \
  || fail "elastic: the restarted run's final checkpoint differs from the uninterrupted run's"

# ---- --timeout and the launcher watchdog, both at once (each waits seconds on a hung rank, not
# computing): rank 1 hangs (SIGSTOP) in each job. With --timeout 3 the collective timeout fails the
# others; with a long collective timeout the watchdog sees no heartbeat for 3 s, names each rank's
# last step, sends SIGUSR1 (rank 0 dumps its stack) and stops the job. --epochs 100: neither job
# may end before its rank 1 is stopped.
start=$(date +%s)
"$launch" --nproc-per-node 2 --kill-grace 1 -- "$mnist" "${ddp[@]}" --epochs 100 --timeout 3 > "$dir/hang.log" 2>&1 &
hang=$!
"$launch" --nproc-per-node 2 --kill-grace 1 --watchdog-timeout 3 -- "$mnist" "${ddp[@]}" --epochs 100 \
  > "$dir/stall.log" 2>&1 &
stall=$!
for job in hang stall; do
  wait_for "$dir/$job.log" "epoch 1 step 10/50" || fail "the $job run never reached step 10"
  rank1=$(rank_pid "${!job}" 1)
  [ -n "$rank1" ] && kill -STOP "$rank1" || fail "the $job run's rank 1 was not found"
done
wait "$hang"
code=$?
elapsed=$(($(date +%s) - start))
grep "rank 0\] mnist:\|launch:" "$dir/hang.log"
[ "$code" -ne 0 ] || fail "--timeout: a hung rank did not fail the job"
[ "$elapsed" -lt 60 ] || fail "--timeout 3: the job took $elapsed s to fail"
grep -q "\[rank 0\] mnist: .* failed after 3.0 s on rank 0: ranks \[1\] did not arrive" "$dir/hang.log" \
  || fail "--timeout: rank 0's error does not name the collective, the 3 s and the missing rank 1"
wait "$stall"
code=$?
elapsed=$(($(date +%s) - start))
grep "launch:\|watchdog" "$dir/stall.log" | head -5
[ "$code" -eq 124 ] || fail "watchdog: launcher exit status $code (want 124)"
[ "$elapsed" -lt 60 ] || fail "watchdog: took $elapsed s"
grep -q "launch: watchdog: no rank made progress for 3 s (last heartbeats: rank 0: step [0-9]*, rank 1: step [0-9]*)" \
  "$dir/stall.log" || fail "watchdog: no report naming both ranks' last steps"
grep -q "\[rank 0\] watchdog: SIGUSR1: stack" "$dir/stall.log" || fail "watchdog: rank 0 dumped no stack"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all ok"
