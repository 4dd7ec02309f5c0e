#!/usr/bin/env bash
# With KILN_FLIGHT_RECORDER_DIR set, the launcher asks the ranks still running to dump their
# flight recorders (SIGUSR1) before it stops a failed job; the tool then names the rank behind.
set -u
launch="$1" worker="$2" tool="$3"
dir="${TEST_TMPDIR:-/tmp}/fr_launch"
rm -rf "$dir" && mkdir -p "$dir"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

out=$(KILN_FLIGHT_RECORDER_DIR="$dir" "$launch" --nproc-per-node 2 -- "$worker" 2>&1)
code=$?
echo "$out"
[ "$code" -ne 0 ] || fail "the job should have failed"
[[ "$out" == *"asking the ranks to dump their flight recorders into $dir (SIGUSR1)"* ]] || fail "no SIGUSR1 notice"
[[ "$out" == *"[rank 0] flight recorder: SIGUSR1: wrote $dir/flight_recorder.rank0.json"* ]] || fail "rank 0 did not dump"
report=$("$tool" "$dir" 2>&1)
code=$?
echo "$report"
[ "$code" -eq 2 ] || fail "the tool exited $code (want 2: findings)"
[[ "$report" == *"rank 1 behind: never issued collective #2 (allreduce [64] f32), which rank 0 issued"* ]] ||
  fail "the tool did not name rank 1 as behind at #2"

[ "$failures" -eq 0 ] && echo "all ok" || { echo "$failures failure(s)"; exit 1; }
