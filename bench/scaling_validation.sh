#!/usr/bin/env bash
# Measures everything //bench:scaling_model validates against, in one go: ddp_bench on 1, 2, 3
# ranks (its lines carry the compute alone, timed in blocks interleaved with the DDP and ZeRO-1
# ones), allreduce_bench on 2 and 3 (all-reduce, reduce-scatter, all-gather), then per tbf rate
# the two-namespace collectives and ddp_bench runs (bench/multinode_allreduce.sh, needs root);
# finally the model's report. The load average is logged before each part.
#   tools/bazel build //bench:scaling_model //bench:allreduce_bench //bench:ddp_bench //distributed/launch
#   sudo bench/scaling_validation.sh OUTDIR [--rates "1gbit 200mbit"] [--steps 10] [--blocks 3]
# OUTDIR gets ar.jsonl, ddp.jsonl, load.txt and model.txt (the report).
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
[ $# -ge 1 ] && [[ "$1" != -* ]] || { sed -n '2,10p' "$0"; exit 2; }
out="$1"
shift
rates="1gbit 200mbit"
steps=10
blocks=3
for ((; $# > 0; )); do  # --rates, --steps, --blocks VALUE set the variable of that name
  [[ "$1" =~ ^--(rates|steps|blocks)$ && $# -ge 2 ]] || { echo "scaling_validation.sh: bad flag '$1'" >&2; exit 2; }
  printf -v "${1#--}" '%s' "$2"
  shift 2
done
bin="$here/bazel-bin"
for b in bench/scaling_model bench/allreduce_bench bench/ddp_bench distributed/launch/launch; do
  [ -x "$bin/$b" ] || { echo "scaling_validation.sh: build //$(dirname $b):$(basename $b) first" >&2; exit 2; }
done
mkdir -p "$out"
rm -f "$out"/{ar,ddp}.jsonl "$out/load.txt"
load() { echo "$(date -u +%H:%M:%S) $1: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt"; }

for n in 1 2 3; do
  load "ddp_bench $n rank(s)"
  "$bin/bench/ddp_bench" --nproc "$n" --steps "$steps" --blocks "$blocks" | grep '^{' >>"$out/ddp.jsonl" || exit 1
  if [ "$n" -ge 2 ]; then
    load "allreduce_bench $n ranks"
    for op in allreduce reduce_scatter allgather; do
      "$bin/bench/allreduce_bench" --nproc "$n" --max-bytes 16777216 --op "$op" | grep '^{' >>"$out/ar.jsonl" || exit 1
    done
  fi
done
for rate in $rates; do
  load "namespaces, $rate"
  "$here/bench/multinode_allreduce.sh" --rates "$rate" --json "$out/ar.jsonl" --ddp-json "$out/ddp.jsonl" \
    --ddp-steps "$steps" --ddp-blocks "$blocks" || exit 1
done
load "done"
"$bin/bench/scaling_model" --allreduce "$out/ar.jsonl" --ddp "$out/ddp.jsonl" --cores "$(nproc)" | tee "$out/model.txt"
