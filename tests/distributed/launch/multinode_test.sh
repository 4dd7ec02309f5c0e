#!/usr/bin/env bash
# Multi-node over a real (virtual) network: two "nodes" as network namespaces with their own
# addresses on a bridge, links limited with tbf, one //distributed/launch per node
# (--nnodes 2 --node-rank R --master-addr <node 0's address>) training the main job with --ddp.
#  1. 2 nodes x 2 ranks, flat ring: the same weights (bit for bit) and losses as 1 node x 4
#     ranks over TCP, and the gradients really crossed the link (its byte counters).
#  2. 2 nodes x 2 ranks, hierarchical all-reduce (the default there): the same losses as one
#     node with 4 ranks through shared memory, to f32 rounding.
#  3. Node failure: every rank of node 1 killed mid-epoch; node 0's launcher exits non-zero
#     within the timeout and its output names ranks 2 and 3.
#  4. Silent node loss: node 1's link cut, then its ranks killed (no FIN/RST reaches node 0):
#     node 0 fails at --timeout, again naming ranks 2 and 3.
#  5. Three nodes x 1 rank: the same weights as 1 node x 3 ranks over TCP.
# Needs root (network namespaces); skips visibly without it. Arguments: launch, mnist, the
# netns helper (tools/netns_nodes.sh), tests/fashion_mnist_subset.py.
set -u
launch="$PWD/$1"
mnist="$PWD/$2"
source "$3"
dir="${TEST_TMPDIR:-/tmp}/multinode_$$"
rm -rf "$dir" && mkdir -p "$dir"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

if ! netns_require; then
  echo "skipped: multinode_test $NETNS_WHY"
  # Also into the file Bazel keeps as the test's warnings, seen without --test_output.
  [ -n "${TEST_WARNINGS_OUTPUT_FILE:-}" ] && echo "multinode_test skipped: $NETNS_WHY" >>"$TEST_WARNINGS_OUTPUT_FILE"
  exit 0
fi
netns_up 3 || { echo "FAIL: could not build the namespaces"; exit 1; }
netns_limit 1gbit || { echo "FAIL: could not limit the links"; exit 1; }
master=$(netns_addr 0)
port=29500  # each namespace has its own port space: no clash with other jobs on the machine

# The first 4096 training and 1000 test images (no run here trains on more): each rank reads 4 MB,
# not the whole data set, and evaluates 1000 images.
python3 "$4" "$dir/data" 4096 1000 || { echo "FAIL: no Fashion-MNIST subset"; exit 1; }
common=(--ddp --model mlp --epochs 1 --limit-train 768 --batch-size 32 --seed 3 --threads 1 --log-every 4
        --data-dir "$dir/data")
json_field() { grep -o "\"$2\":[-0-9.e]*" "$1" | tail -1 | cut -d: -f2; }
tx_bytes() { netns_exec "$1" cat /sys/class/net/eth0/statistics/tx_bytes; }

# run_two_nodes NAME [env...]: node 1 in the background, node 0 in the foreground; outputs in
# $dir/NAME.{0,1}, node 0's checkpoint in $dir/NAME.safetensors.
run_two_nodes() {
  local name="$1"
  shift
  ip netns exec "$(netns_name 1)" env "$@" "$launch" --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr "$master" \
    --master-port "$port" -- "$mnist" "${common[@]}" --save "$dir/$name.safetensors" >"$dir/$name.1" 2>&1 &
  local node1=$!
  netns_exec 0 env "$@" "$launch" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr "$master" \
    --master-port "$port" -- "$mnist" "${common[@]}" --save "$dir/$name.safetensors" >"$dir/$name.0" 2>&1
  local rc0=$?
  wait "$node1"
  local rc1=$?
  [ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] && return 0
  echo "$name: node 0 exited $rc0, node 1 exited $rc1"
  sed 's/^/    node0: /' "$dir/$name.0" | tail -20
  sed 's/^/    node1: /' "$dir/$name.1" | tail -20
  return 1
}

echo "== 1 node x 4 ranks over TCP (the reference)"
netns_exec 0 env KILN_SHM_ALLREDUCE=0 "$launch" --nproc-per-node 4 -- "$mnist" "${common[@]}" \
  --save "$dir/one.safetensors" >"$dir/one.0" 2>&1 || { fail "one-node run"; cat "$dir/one.0"; }
grep -q '\[rank 0\] data parallel: 4 ranks (gloo)' "$dir/one.0" || fail "one-node banner"

echo "== 2 nodes x 2 ranks, flat ring over the 1 Gbit/s link"
before=$(tx_bytes 1)
run_two_nodes flat KILN_HIERARCHICAL_ALLREDUCE=0 || fail "two-node flat run"
sent=$(($(tx_bytes 1) - before))
grep -q '\[rank 0\] data parallel: 4 ranks (gloo)' "$dir/flat.0" || fail "two-node banner"
cmp -s "$dir/one.safetensors" "$dir/flat.safetensors" || fail "2x2 flat weights differ from 1x4"
for f in train_loss test_loss test_accuracy; do
  a=$(json_field "$dir/one.0" "$f")
  b=$(json_field "$dir/flat.0" "$f")
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "$f: one node $a, two nodes $b"
done
# 6 steps x 1.07 MB of MLP gradients (269k f32), of which a 4-rank ring sends 1.5x per node.
echo "node 1 sent $sent bytes"
[ "$sent" -gt 6000000 ] || fail "node 1 sent only $sent bytes over its link: did the ranks talk over loopback?"

echo "== 2 nodes x 2 ranks, hierarchical all-reduce"
netns_exec 0 "$launch" --nproc-per-node 4 -- "$mnist" "${common[@]}" >"$dir/shm.0" 2>&1 ||
  { fail "one-node shared-memory run"; cat "$dir/shm.0"; }
run_two_nodes hier || fail "two-node hierarchical run"
grep -q 'hierarchical all-reduce: 2 nodes x 2 ranks' "$dir/hier.0" || fail "no hierarchical banner"
for f in train_loss test_loss; do
  a=$(json_field "$dir/shm.0" "$f")
  b=$(json_field "$dir/hier.0" "$f")
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-4 * (a < 0 ? -a : a) + 1e-6) }' ||
    fail "$f: shared memory $a, hierarchical $b"
done

# The failure scenarios train long enough to be killed mid-epoch.
long=(--ddp --model mlp --epochs 50 --limit-train 4096 --batch-size 32 --seed 3 --threads 1 --log-every 2
      --data-dir "$dir/data")

# start_failure_run NAME TIMEOUT: both nodes in the background; sets node0/node1 pids.
start_failure_run() {
  ip netns exec "$(netns_name 1)" "$launch" --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr "$master" \
    --master-port "$port" -- "$mnist" "${long[@]}" --timeout "$2" >"$dir/$1.1" 2>&1 &
  node1=$!
  ip netns exec "$(netns_name 0)" "$launch" --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr "$master" \
    --master-port "$port" -- "$mnist" "${long[@]}" --timeout "$2" >"$dir/$1.0" 2>&1 &
  node0=$!
  for _ in $(seq 1 1200); do
    grep -q '\[rank 0\] epoch 1 step' "$dir/$1.0" && return 0
    sleep 0.05
  done
  fail "$1: training never started"
  return 1
}
# kill_node PID: SIGKILL to the launcher's ranks, then to the launcher (the whole node gone).
kill_node() {
  local ranks
  ranks=$(cat "/proc/$1/task/$1/children" 2>/dev/null)
  [ -n "$ranks" ] || { fail "node 1's launcher $1 has no ranks to kill"; return; }
  kill -KILL $ranks "$1"
}
# check_node0 NAME MAX_SECONDS START: node 0's launcher failed in time, naming ranks 2 and 3.
check_node0() {
  wait "$node0"
  local rc=$? took=$(($(date +%s) - $3))
  wait "$node1" 2>/dev/null
  echo "$1: node 0's launcher exited $rc after ${took}s"
  [ "$rc" -ne 0 ] || fail "$1: node 0's launcher exited 0"
  [ "$took" -le "$2" ] || fail "$1: node 0 took ${took}s to fail (limit $2 s)"
  grep -qE 'ranks \[2, 3\] (did not arrive|stopped responding)' "$dir/$1.0" ||
    { fail "$1: node 0's output does not name ranks 2 and 3"; tail -15 "$dir/$1.0"; }
  grep -q '^launch: rank [01] .*exited with status' "$dir/$1.0" || fail "$1: no launcher failure line"
  grep -m1 -E 'did not arrive|stopped responding' "$dir/$1.0"
}

echo "== node failure: node 1's ranks killed mid-epoch"
if start_failure_run killed 60; then
  t0=$(date +%s)
  kill_node "$node1"
  check_node0 killed 60 "$t0"
fi

echo "== silent node loss: node 1's link cut, then its ranks killed (timeout 8 s)"
if start_failure_run silent 8; then
  t0=$(date +%s)
  ip link set "$(netns_veth 1)" down
  kill_node "$node1"
  check_node0 silent 30 "$t0"
  ip link set "$(netns_veth 1)" up
fi

echo "== 3 nodes x 1 rank against 1 node x 3 ranks"
netns_exec 0 env KILN_SHM_ALLREDUCE=0 "$launch" --nproc-per-node 3 -- "$mnist" "${common[@]}" \
  --save "$dir/one3.safetensors" >"$dir/one3.0" 2>&1 || { fail "one-node 3-rank run"; cat "$dir/one3.0"; }
pids=()
for r in 2 1; do
  ip netns exec "$(netns_name "$r")" "$launch" --nnodes 3 --node-rank "$r" --nproc-per-node 1 --master-addr "$master" \
    --master-port "$port" -- "$mnist" "${common[@]}" --save "$dir/three.safetensors" >"$dir/three.$r" 2>&1 &
  pids+=($!)
done
netns_exec 0 "$launch" --nnodes 3 --node-rank 0 --nproc-per-node 1 --master-addr "$master" --master-port "$port" \
  -- "$mnist" "${common[@]}" --save "$dir/three.safetensors" >"$dir/three.0" 2>&1 || { fail "3-node run"; cat "$dir/three.0"; }
for p in "${pids[@]}"; do wait "$p" || fail "a 3-node launcher failed"; done
grep -q '\[rank 0\] all-reduce: TCP ring' "$dir/three.0" || fail "3 nodes x 1 rank should use the flat TCP ring"
cmp -s "$dir/one3.safetensors" "$dir/three.safetensors" || fail "3x1 weights differ from 1x3"

if [ "$failures" -gt 0 ]; then
  echo "$failures failure(s)"
  exit 1
fi
echo "all ok"
