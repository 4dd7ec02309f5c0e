#!/usr/bin/env bash
# All-reduce bus bandwidth between two "nodes" (network namespaces joined by veths and a bridge,
# each link limited with tbf) against the link's rate, and hierarchical vs flat all-reduce with
# two ranks per node. Runs //bench:allreduce_bench under one //distributed/launch per node.
# Needs root. Usage (from the repository root, after building the two targets):
#   tools/bazel build //distributed/launch //bench:allreduce_bench
#   sudo bench/multinode_allreduce.sh [--rates "1gbit 200mbit"] [--max-bytes N] [--json FILE]
# Prints, per rate: the measured busbw of the largest message (2 nodes x 1 rank), the link rate,
# their ratio; then 2 nodes x 2 ranks flat ring vs hierarchical (algbw: the user-visible speed).
# With --json, every run's allreduce_bench JSON line is appended to FILE, tagged with the rate
# and layout (input for //bench:scaling_model --allreduce), with 2 nodes x 1 rank's reduce-scatter
# and all-gather (--op) beside the all-reduce; with --ddp-json FILE, //bench:ddp_bench
# also runs on 2 nodes x 1 rank per rate (short: --ddp-blocks 3 of --ddp-steps 5), its line tagged
# alike (for scaling_model --ddp).
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
launch="$here/bazel-bin/distributed/launch/launch"
bench="$here/bazel-bin/bench/allreduce_bench"
rates="1gbit 200mbit"
max_bytes=$((16 << 20))
json=""
ddp_json=""
ddp_bench="$here/bazel-bin/bench/ddp_bench"
ddp_steps=5
ddp_blocks=3
while [ $# -gt 0 ]; do
  case "$1" in
    --rates) rates="$2"; shift 2 ;;
    --max-bytes) max_bytes="$2"; shift 2 ;;
    --json) json="$2"; shift 2 ;;
    --ddp-json) ddp_json="$2"; shift 2 ;;
    --ddp-steps) ddp_steps="$2"; shift 2 ;;
    --ddp-blocks) ddp_blocks="$2"; shift 2 ;;
    --launch) launch="$2"; shift 2 ;;
    --bench) bench="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "multinode_allreduce.sh: unknown flag '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for b in "$launch" "$bench"; do
  [ -x "$b" ] || { echo "multinode_allreduce.sh: $b is missing: tools/bazel build //distributed/launch //bench:allreduce_bench" >&2; exit 2; }
done
source "$here/tools/netns_nodes.sh"
netns_require || { echo "multinode_allreduce.sh: $NETNS_WHY" >&2; exit 2; }
netns_up 2 || exit 1
tmp=$(mktemp -d)
trap 'netns_down; rm -rf "$tmp"' EXIT

# run_bench PER_NODE HIER [PROGRAM ARGS...]: prints the JSON line of rank 0; nonzero when a node
# failed. The program defaults to allreduce_bench --max-bytes.
run_bench() {
  local per="$1" hier="$2"
  shift 2
  [ $# -gt 0 ] || set -- "$bench" --max-bytes "$max_bytes"
  ip netns exec "$(netns_name 1)" env KILN_HIERARCHICAL_ALLREDUCE="$hier" "$launch" --nnodes 2 --node-rank 1 \
    --nproc-per-node "$per" --master-addr "$(netns_addr 0)" --master-port 29500 -- "$@" >"$tmp/node1" 2>&1 &
  local node1=$!
  ip netns exec "$(netns_name 0)" env KILN_HIERARCHICAL_ALLREDUCE="$hier" "$launch" --nnodes 2 --node-rank 0 \
    --nproc-per-node "$per" --master-addr "$(netns_addr 0)" --master-port 29500 -- "$@" >"$tmp/node0" 2>&1
  local rc0=$?
  wait "$node1"
  local rc1=$?
  if [ "$rc0" -ne 0 ] || [ "$rc1" -ne 0 ]; then
    echo "allreduce_bench failed (node 0: $rc0, node 1: $rc1)" >&2
    tail -5 "$tmp/node0" "$tmp/node1" >&2
    return 1
  fi
  grep '^\[rank 0\] {' "$tmp/node0" | tail -1 | sed 's/^\[rank 0\] //'
}

# field JSON KEY: KEY of the largest message's result.
largest() { python3 -c 'import json,sys; r=json.loads(sys.argv[1])["results"][-1]; print(r[sys.argv[2]])' "$1" "$2"; }
record() {  # JSON RATE LAYOUT
  [ -n "$json" ] || return 0
  python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["link"]=sys.argv[2]; d["layout"]=sys.argv[3]; print(json.dumps(d))' \
    "$1" "$2" "$3" >>"$json"
}

# Bytes each node sends over its link per byte all-reduced: a ring over n ranks sends 2(n-1)/n
# per rank and here one rank per node talks across (2x1: 1; 2x2 flat: 1.5); the hierarchy's
# leaders form a 2-rank ring (1). "link use" = algbw x that / the link's rate.
printf '%-8s %-22s %10s %11s %11s %9s\n' link layout "bytes" "algbw GB/s" "busbw GB/s" "link use"
for rate in $rates; do
  netns_limit "$rate" || exit 1
  link_gbs=$(awk -v b="$(netns_rate_bits "$rate")" 'BEGIN { printf "%.4f", b / 8 / 1e9 }')
  for layout in "1 0 2x1 1" "2 0 2x2-flat 1.5" "2 1 2x2-hierarchical 1"; do
    set -- $layout
    out=$(run_bench "$1" "$2") || exit 1
    record "$out" "$rate" "$3"
    algbw=$(largest "$out" algbw_gbs)
    busbw=$(largest "$out" busbw_gbs)
    bytes=$(largest "$out" bytes)
    frac=$(awk -v a="$algbw" -v f="$4" -v l="$link_gbs" 'BEGIN { printf "%.2f", a * f / l }')
    printf '%-8s %-22s %10s %11.4f %11.4f %9s\n' "$rate" "$3" "$bytes" "$algbw" "$busbw" "$frac"
  done
  echo "         link $rate = $link_gbs GB/s each way (hierarchical/flat algbw is 1.5 at best)"
  if [ -n "$json" ]; then  # ZeRO-1's collectives too, for scaling_model's ZeRO prediction
    for op in reduce_scatter allgather; do
      out=$(run_bench 1 0 "$bench" --max-bytes "$max_bytes" --op "$op") || exit 1
      record "$out" "$rate" 2x1
      echo "         $op 2x1 over $rate: busbw $(largest "$out" busbw_gbs) GB/s"
    done
  fi
  if [ -n "$ddp_json" ]; then
    [ -x "$ddp_bench" ] || { echo "multinode_allreduce.sh: build //bench:ddp_bench for --ddp-json" >&2; exit 2; }
    out=$(run_bench 1 0 "$ddp_bench" --steps "$ddp_steps" --blocks "$ddp_blocks") || exit 1
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["link"]=sys.argv[2]; print(json.dumps(d))' \
      "$out" "$rate" >>"$ddp_json"
    echo "         ddp_bench 2x1 over $rate: $(python3 -c 'import json,sys; print(", ".join("%s %.1f ms" % (r["model"], r["overlap_step_ms"]) for r in json.loads(sys.argv[1])["results"]))' "$out")"
  fi
done
