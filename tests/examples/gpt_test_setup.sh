# The shared set-up of the GPT trainer's multi-process shell tests (sourced, with the scratch
# directory's name): $dir holding a small repetitive corpus, the tiny model's flags in $common,
# fail() counting into $failures, json/field reading the closing JSON line, and
# close <a> <b> <relative tolerance>.
dir="${TEST_TMPDIR:-/tmp}/$1"
rm -rf "$dir" && mkdir -p "$dir"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
for i in $(seq 1 1600); do echo "The quick brown fox jumps over the lazy dog $((i % 7)). A stitch in time saves nine."; done \
  > "$dir/corpus.txt"
common=(--data "$dir/corpus.txt" --n-layer 2 --n-head 2 --n-embd 32 --block-size 16 --max-steps 4
        --warmup-steps 1 --eval-batches 2 --sample-tokens 0 --threads 1)
json() { echo "$1" | grep -o '{"model".*' | tail -1; }
field() { echo "$1" | grep -o "\"$2\":[0-9.e+-]*" | cut -d: -f2; }
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= t * (b < 0 ? -b : b)) }'; }
