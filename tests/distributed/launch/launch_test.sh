#!/usr/bin/env bash
# The launcher binary end to end: rank prefixes and environment, failure of one rank stopping
# the others, SIGTERM to the launcher, SIGKILL after the grace period, bad flags, program
# lookup, and a real 3-rank env:// rendezvous of store_worker processes.
# Arguments: the launch binary, the store_worker binary.
set -uo pipefail
launch="$PWD/$1"
worker="$PWD/$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/launch_test"
rm -rf "$tmp" && mkdir -p "$tmp"
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
expect_contains() {  # file, text, what
  grep -qF -- "$2" "$1" || { fail "$3: expected '$2' in $1:"; sed 's/^/    /' "$1"; }
}
# Waits up to 60 s for a file to exist (processes start slowly on a loaded machine).
wait_for_file() {
  for _ in $(seq 1 1200); do [ -s "$1" ] && return 0; sleep 0.05; done
  return 1
}
# Waits up to 30 s for a pid to be gone: no such process, or a zombie (dead, waiting for an
# orphan reaper that may be slow).
gone() {
  for _ in $(seq 1 600); do
    [ -e "/proc/$1" ] || return 0
    [ "$(sed -E 's/^[0-9]+ \(.*\) (.).*/\1/' "/proc/$1/stat" 2>/dev/null)" = Z ] && return 0
    sleep 0.05
  done
  return 1
}

echo "== rank prefixes, environment, partial last lines"
"$launch" --nproc-per-node 3 -- sh -c \
  'echo "env $RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $KILN_NUM_THREADS"
   echo "to stderr $RANK" >&2
   printf "no newline $RANK"' >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 0 ] || fail "launcher exited $rc for ranks that all succeeded"
for r in 0 1 2; do
  grep -qE "^\[rank $r\] env $r $r 3 3 127\.0\.0\.1 [0-9]+ [0-9]+$" "$tmp/out" || fail "rank $r env line"
  expect_contains "$tmp/out" "[rank $r] no newline $r" "partial line of rank $r"
  expect_contains "$tmp/err" "[rank $r] to stderr $r" "stderr line of rank $r"
  grep -q "to stderr" "$tmp/out" && fail "stderr lines leaked to stdout"
done
[ "$(grep -c '^\[rank' "$tmp/out")" -eq 6 ] || fail "expected 6 stdout lines"
ports=$(sed -nE 's/^\[rank [0-9]\] env .* ([0-9]+) [0-9]+$/\1/p' "$tmp/out" | sort -u | wc -l)
[ "$ports" -eq 1 ] || fail "ranks disagree on MASTER_PORT"
threads=$(sed -nE 's/^\[rank 0\] env .* ([0-9]+)$/\1/p' "$tmp/out")
[ "${threads:-0}" -ge 1 ] || fail "KILN_NUM_THREADS=$threads"

echo "== a user's KILN_NUM_THREADS and --master-port are kept"
KILN_NUM_THREADS=7 "$launch" --nproc-per-node=2 --master-port=29999 sh -c 'echo "$KILN_NUM_THREADS $MASTER_PORT"' \
  >"$tmp/out" 2>"$tmp/err" || fail "launcher failed: $(cat "$tmp/err")"
[ "$(grep -c '\] 7 29999$' "$tmp/out")" -eq 2 ] || { fail "KILN_NUM_THREADS/MASTER_PORT not passed"; cat "$tmp/out"; }

echo "== one rank exits with status 3: the others are stopped"
rm -f "$tmp"/pid.*
start=$(date +%s)
"$launch" --nproc-per-node 3 -- sh -c \
  'echo $$ > '"$tmp"'/pid.$RANK.tmp; mv '"$tmp"'/pid.$RANK.tmp '"$tmp"'/pid.$RANK
   if [ "$RANK" = 1 ]; then
     while [ ! -s '"$tmp"'/pid.0 ] || [ ! -s '"$tmp"'/pid.2 ]; do sleep 0.05; done
     exit 3
   fi
   exec sleep 1000' >"$tmp/out" 2>"$tmp/err"
rc=$?
elapsed=$(($(date +%s) - start))
[ "$rc" -eq 3 ] || fail "launcher exit status $rc, expected the rank's 3"
[ "$elapsed" -lt 60 ] || fail "launcher took ${elapsed}s to stop"
expect_contains "$tmp/err" "launch: rank 1 (pid $(cat "$tmp/pid.1")) exited with status 3; stopped the other ranks" "failure message"
for r in 0 2; do gone "$(cat "$tmp/pid.$r")" || fail "rank $r (sleeping) still running"; done

echo "== a rank killed by a signal"
"$launch" --nproc-per-node 2 -- sh -c 'if [ "$RANK" = 0 ]; then kill -9 $$; fi; exec sleep 1000' \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 137 ] || fail "launcher exit status $rc, expected 128+9"
expect_contains "$tmp/err" "was killed by signal 9 (SIGKILL); stopped the other ranks" "signal message"

echo "== SIGTERM to the launcher stops the ranks"
rm -f "$tmp"/pid.*
"$launch" --nproc-per-node 3 -- sh -c \
  'echo $$ > '"$tmp"'/pid.$RANK.tmp; mv '"$tmp"'/pid.$RANK.tmp '"$tmp"'/pid.$RANK; exec sleep 1000' \
  >"$tmp/out" 2>"$tmp/err" &
lpid=$!
for r in 0 1 2; do wait_for_file "$tmp/pid.$r" || fail "rank $r never started"; done
kill -TERM "$lpid"
wait "$lpid"
rc=$?
[ "$rc" -eq 143 ] || fail "launcher exit status $rc after SIGTERM, expected 143"
expect_contains "$tmp/err" "launch: received signal 15 (SIGTERM); stopped the ranks" "SIGTERM message"
for r in 0 1 2; do gone "$(cat "$tmp/pid.$r")" || fail "rank $r still running after SIGTERM"; done

echo "== ranks do not outlive a launcher killed with SIGKILL"
rm -f "$tmp"/pid.*
"$launch" --nproc-per-node 2 -- sh -c \
  'echo $$ > '"$tmp"'/pid.$RANK.tmp; mv '"$tmp"'/pid.$RANK.tmp '"$tmp"'/pid.$RANK; exec sleep 1000' \
  >"$tmp/out" 2>"$tmp/err" &
lpid=$!
for r in 0 1; do wait_for_file "$tmp/pid.$r" || fail "rank $r never started"; done
kill -KILL "$lpid"
wait "$lpid" 2>/dev/null
for r in 0 1; do gone "$(cat "$tmp/pid.$r")" || fail "rank $r outlived the launcher"; done

echo "== ranks that ignore SIGTERM are killed after the grace period"
rm -f "$tmp"/pid.*
start=$(date +%s)
"$launch" --nproc-per-node 2 --kill-grace 0.5 -- sh -c \
  'trap "" TERM; echo $$ > '"$tmp"'/pid.$RANK.tmp; mv '"$tmp"'/pid.$RANK.tmp '"$tmp"'/pid.$RANK
   if [ "$RANK" = 1 ]; then while [ ! -s '"$tmp"'/pid.0 ]; do sleep 0.05; done; exit 4; fi
   while :; do sleep 0.1; done' >"$tmp/out" 2>"$tmp/err"
rc=$?
elapsed=$(($(date +%s) - start))
[ "$rc" -eq 4 ] || fail "launcher exit status $rc, expected 4"
[ "$elapsed" -lt 60 ] || fail "launcher took ${elapsed}s"
expect_contains "$tmp/err" "rank 0 (pid $(cat "$tmp/pid.0")) still running 0.5 s after being asked to stop; sending SIGKILL" "SIGKILL message"
gone "$(cat "$tmp/pid.0")" || fail "rank 0 survived SIGKILL"

echo "== bad flags exit 2 with a message naming the flag, then the usage"
for args in "--bogus x" "--nproc-per-node" "--nproc-per-node 0 sh" "--nproc-per-node two sh" \
            "--nproc-per-node 2" "--nnodes 2 --node-rank 2 --master-port 29500 sh" \
            "--nnodes 2 --node-rank 1 sh" "--master-port 70000 sh" "--kill-grace -1 sh" \
            "--kill-grace soon sh" "--nproc-per-node 2 -x sh"; do
  # shellcheck disable=SC2086
  "$launch" $args >"$tmp/out" 2>"$tmp/err"
  rc=$?
  [ "$rc" -eq 2 ] || fail "'launch $args' exited $rc, expected 2"
  expect_contains "$tmp/err" "launch [flags] [--] PROGRAM [ARGS...]" "usage for '$args'"
done
"$launch" --nproc-per-node two sh 2>"$tmp/err"
expect_contains "$tmp/err" "--nproc-per-node: expects an integer, got 'two'" "flag error message"
"$launch" --master-port 70000 sh 2>"$tmp/err"
expect_contains "$tmp/err" "--master-port: must be in [0, 65535], got 70000" "range error message"
"$launch" --bogus x 2>"$tmp/err"
expect_contains "$tmp/err" 'unknown flag "--bogus"' "unknown flag message"
"$launch" --help >"$tmp/out" 2>&1 || fail "--help exited non-zero"
expect_contains "$tmp/out" "--nproc-per-node" "help text"
expect_contains "$tmp/out" "BUILD_WORKING_DIRECTORY" "help text footer"

echo "== programs that cannot run are named"
"$launch" --nproc-per-node 2 -- no-such-program-kiln >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] || fail "missing program: expected exit 1"
expect_contains "$tmp/err" 'program "no-such-program-kiln" not found in PATH' "missing program message"
printf 'echo hi\n' >"$tmp/not_exec.sh"
chmod -x "$tmp/not_exec.sh"
"$launch" -- "$tmp/not_exec.sh" >"$tmp/out" 2>"$tmp/err"
[ $? -eq 1 ] || fail "non-executable program: expected exit 1"
expect_contains "$tmp/err" "is not executable" "non-executable message"

echo "== a relative program is found under BUILD_WORKING_DIRECTORY, and ranks start there"
mkdir -p "$tmp/bwd/bin" "$tmp/elsewhere"
printf '#!/bin/sh\necho "ran in $(pwd) as rank $RANK"\n' >"$tmp/bwd/bin/prog.sh"
chmod +x "$tmp/bwd/bin/prog.sh"
(cd "$tmp/elsewhere" && BUILD_WORKING_DIRECTORY="$tmp/bwd" "$launch" --nproc-per-node 2 -- bin/prog.sh) \
  >"$tmp/out" 2>"$tmp/err" || fail "BUILD_WORKING_DIRECTORY lookup failed: $(cat "$tmp/err")"
expect_contains "$tmp/out" "[rank 1] ran in $tmp/bwd as rank 1" "program under BUILD_WORKING_DIRECTORY"

echo "== three store_worker ranks rendezvous over env://"
"$launch" --nproc-per-node 3 -- "$worker" rendezvous env:// >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 0 ] || { fail "rendezvous through the launcher exited $rc"; cat "$tmp/err"; }
for r in 0 1 2; do
  expect_contains "$tmp/out" "[rank $r] rank $r world 3 local $r/3" "rendezvous rank $r"
  expect_contains "$tmp/out" "[rank $r] exchange ok rank $r" "exchange rank $r"
done

echo "== --max-restarts: the whole group restarts on a fresh port with KILN_RESTART_COUNT, then gives up naming each failure"
# (exec: a rank that is sleep itself ends on the launcher's SIGTERM; a shell's orphaned sleep would
# hold the output pipes, and the launcher reads them for 2 s more each round.)
"$launch" --nproc-per-node 2 --max-restarts 2 -- sh -c \
  'echo "attempt $KILN_RESTART_COUNT $TORCHELASTIC_RESTART_COUNT port $MASTER_PORT"; [ "$RANK" = 1 ] && sleep 0.5 && exit 3; exec sleep 30' \
  >"$tmp/out" 2>"$tmp/err"
code=$?
[ "$code" -eq 3 ] || fail "--max-restarts 2 with a rank that always fails: exit $code (want 3)"
for a in 0 1 2; do expect_contains "$tmp/out" "[rank 1] attempt $a $a port" "restart $a"; done
[ "$(grep -c '^\[rank 0\] attempt' "$tmp/out")" -eq 3 ] || fail "rank 0 was not restarted with rank 1"
[ "$(grep -o 'port [0-9]*' "$tmp/out" | sort -u | wc -l)" -ge 2 ] || fail "every round reused one port"
expect_contains "$tmp/err" "launch: restarting all 2 ranks (restart 1 of 2) after: rank 1 (pid" "first restart"
expect_contains "$tmp/err" "launch: restarting all 2 ranks (restart 2 of 2) after: rank 1 (pid" "second restart"
expect_contains "$tmp/err" "launch: giving up after 2 restart(s); the failures were:" "giving up"
[ "$(grep -c 'attempt [123]: rank 1 (pid [0-9]*) exited with status 3' "$tmp/err")" -eq 3 ] \
  || { fail "the give-up message should name all 3 failures:"; cat "$tmp/err"; }
# A job that succeeds after one failure exits 0; a stop signal to the launcher is never restarted.
"$launch" --nproc-per-node 1 --max-restarts 1 -- sh -c '[ "$KILN_RESTART_COUNT" = 1 ] || exit 4' >"$tmp/out" 2>"$tmp/err"
code=$?
[ "$code" -eq 0 ] || fail "a job that succeeds on its restart exited $code"
"$launch" --nproc-per-node 1 --max-restarts 3 -- sh -c 'echo started; exec sleep 30' >"$tmp/out" 2>"$tmp/err" &
lpid=$!
for _ in $(seq 1 600); do grep -q started "$tmp/out" && break; sleep 0.05; done
kill -TERM "$lpid"
wait "$lpid"
code=$?
[ "$code" -eq 143 ] || fail "SIGTERM under --max-restarts: exit $code (want 143)"
[ "$(grep -c started "$tmp/out")" -eq 1 ] || fail "the launcher restarted after its own SIGTERM"
"$launch" --nnodes 2 --master-port 29999 --max-restarts 1 -- true 2>"$tmp/err"
[ $? -eq 2 ] && expect_contains "$tmp/err" "--max-restarts needs --nnodes 1" "multi-node restarts refused"

echo "== --watchdog-timeout: no heartbeat for the timeout -> each rank's last step named, SIGUSR1, stop, exit 124"
start=$(date +%s)
# (The stalled ranks wait on a background sleep, so the USR1 trap runs at once; their TERM trap
# ends that sleep too, which would otherwise hold the output pipes, the launcher reading them 2 s more.)
"$launch" --nproc-per-node 2 --watchdog-timeout 2 --kill-grace 1 -- sh -c '
  trap "echo got SIGUSR1" USR1
  trap "kill \$! 2>/dev/null; exit 143" TERM
  last=$((5 - RANK)); i=0
  while [ $i -lt $last ]; do i=$((i + 1)); printf "%20d\n" $i > "$KILN_HEARTBEAT_FILE"; sleep 0.2; done
  echo "rank $RANK hangs at step $last"; sleep 100 & while :; do wait; done' >"$tmp/out" 2>"$tmp/err"
code=$?
elapsed=$(($(date +%s) - start))
[ "$code" -eq 124 ] || fail "watchdog: exit $code (want 124)"
[ "$elapsed" -lt 20 ] || fail "watchdog: took $elapsed s to stop a job stalled for 2 s"
expect_contains "$tmp/err" "launch: watchdog: no rank made progress for 2 s (last heartbeats: rank 0: step 5, rank 1: step 4); stalled rank(s) furthest behind: 1" "watchdog report"
expect_contains "$tmp/out" "[rank 0] got SIGUSR1" "SIGUSR1 to rank 0"
expect_contains "$tmp/out" "[rank 1] got SIGUSR1" "SIGUSR1 to rank 1"
expect_contains "$tmp/err" "launch: stopped the job: no rank made progress" "watchdog stop line"
# A job that keeps beating is left alone (2 s: twice the timeout).
"$launch" --nproc-per-node 1 --watchdog-timeout 1 -- sh -c '
  for i in 1 2 3 4 5 6 7 8; do printf "%20d\n" $i > "$KILN_HEARTBEAT_FILE"; sleep 0.25; done' \
  >"$tmp/out" 2>"$tmp/err"
code=$?
[ "$code" -eq 0 ] || { fail "watchdog: a job beating every 0.25 s was stopped (exit $code)"; cat "$tmp/err"; }

if [ "$failures" -ne 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all launcher checks passed"
