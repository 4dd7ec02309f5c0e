#!/usr/bin/env bash
# Runs one fuzz target (see fuzz.bzl): run_fuzz_test.sh BINARY CORPUS_DIR fuzz|replay.
#   replay: every corpus file once (any build).
#   fuzz:   libFuzzer for KILN_FUZZ_SECONDS (default 60) from a scratch copy of the corpus; a
#           crash leaves its input in $TEST_UNDECLARED_OUTPUTS_DIR (or the test's tmp dir) and
#           fails the test; add that file to the corpus once fixed.
set -euo pipefail
bin=$1 corpus=$2 mode=$3
[ -d "$corpus" ] || { echo "no corpus directory $corpus" >&2; exit 1; }
count=$(find -L "$corpus" -type f | wc -l)
[ "$count" -gt 0 ] || { echo "corpus $corpus is empty" >&2; exit 1; }

case "$mode" in
  replay)
    exec "$bin" "$corpus"
    ;;
  fuzz)
    seconds=${KILN_FUZZ_SECONDS:-60}
    out=${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR:-$(mktemp -d)}}
    work=$(mktemp -d "${TEST_TMPDIR:-/tmp}/corpus.XXXXXX")
    # -rss_limit_mb: a reader that allocates what a header claims instead of what the file
    # holds is a bug, and shows up here as an out-of-memory crash.
    set +e
    "$bin" "$work" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 \
      -timeout=10 -print_final_stats=1 -artifact_prefix="$out/" 2>&1 | grep -v '^#[0-9].*\(NEW\|REDUCE\|pulse\)'
    status=${PIPESTATUS[0]}
    set -e
    echo "fuzzed $seconds s from $count seed inputs; corpus grew to $(find -L "$work" -type f | wc -l) inputs"
    exit "$status"
    ;;
  *)
    echo "mode must be fuzz or replay, got '$mode'" >&2
    exit 2
    ;;
esac
