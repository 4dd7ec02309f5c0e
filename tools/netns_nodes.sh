# Virtual "nodes" for multi-node tests and benchmarks: Linux network namespaces, each with its
# own address, joined by veth pairs to one bridge, links optionally rate-limited with tbf.
# Sourced, not run:
#   source tools/netns_nodes.sh
#   netns_require || { echo "SKIPPED: $NETNS_WHY"; exit 0; }
#   netns_up 2            # nodes 0 and 1: $(netns_name 0), address $(netns_addr 0)
#   netns_limit 1gbit     # each node's link, both directions
#   netns_exec 1 cmd...   # run in node 1
#   netns_down            # also done by the EXIT trap netns_up installs
# Names carry this shell's PID, so parallel users do not collide.

NETNS_TAG="kn$$"
NETNS_COUNT=0
NETNS_WHY=""

netns_name() { echo "${NETNS_TAG}n$1"; }
netns_addr() { echo "10.77.0.$(($1 + 1))"; }
netns_veth() { echo "${NETNS_TAG}v$1"; }  # the bridge's end; the node's end is "eth0"

# True when this shell may create namespaces, veths, a bridge and tbf qdiscs; else sets NETNS_WHY.
netns_require() {
  if [ "$(id -u)" -ne 0 ]; then NETNS_WHY="needs root to create network namespaces (running as uid $(id -u))"; return 1; fi
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    NETNS_WHY="needs the ip and tc commands (Debian package iproute2)"
    return 1
  fi
  local probe="${NETNS_TAG}probe"
  if ! ip netns add "$probe" 2>/dev/null; then NETNS_WHY="'ip netns add' failed (no CAP_SYS_ADMIN?)"; return 1; fi
  local ok=0
  if ip link add "${probe}a" type veth peer name "${probe}b" 2>/dev/null; then
    tc qdisc add dev "${probe}a" root tbf rate 1gbit burst 64kb latency 50ms 2>/dev/null && ok=1
    ip link del "${probe}a" 2>/dev/null
  fi
  ip netns del "$probe"
  [ "$ok" -eq 1 ] || { NETNS_WHY="cannot create a veth pair with a tbf qdisc (kernel without veth/sch_tbf?)"; return 1; }
}

netns_down() {
  local i
  for ((i = 0; i < NETNS_COUNT; i++)); do
    ip link del "$(netns_veth "$i")" 2>/dev/null
    ip netns del "$(netns_name "$i")" 2>/dev/null
  done
  ip link del "${NETNS_TAG}br" 2>/dev/null
  NETNS_COUNT=0
  return 0
}

# netns_up N: N namespaces on 10.77.0.0/24 behind the bridge ${NETNS_TAG}br (no address of its
# own: the namespaces reach only each other). Installs an EXIT trap that tears everything down.
netns_up() {
  local n="$1" i
  trap 'netns_down' EXIT
  trap 'netns_down; exit 130' INT TERM
  ip link add "${NETNS_TAG}br" type bridge || return 1
  ip link set "${NETNS_TAG}br" up || return 1
  for ((i = 0; i < n; i++)); do
    local ns
    ns=$(netns_name "$i")
    ip netns add "$ns" || return 1
    NETNS_COUNT=$((i + 1))
    ip link add "$(netns_veth "$i")" type veth peer name eth0 netns "$ns" || return 1
    ip link set "$(netns_veth "$i")" master "${NETNS_TAG}br" up || return 1
    ip -n "$ns" addr add "$(netns_addr "$i")/24" dev eth0 || return 1
    ip -n "$ns" link set eth0 up || return 1
    ip -n "$ns" link set lo up || return 1
  done
  # No STP on the bridge: its ports forward as soon as they are up, and the job's own
  # connections retry until their timeout anyway.
}

# netns_limit RATE: every node's link limited to RATE (tc units: 1gbit, 200mbit) each way, with
# tbf on both ends of each veth (the node's egress and the bridge's egress towards the node).
netns_limit() {
  local rate="$1" i bits
  bits=$(netns_rate_bits "$rate") || return 1
  # A burst of ~2 ms at the rate (at least 64 KB, so a 64 KB GSO segment always fits).
  local burst=$((bits / 8 / 500))
  [ "$burst" -ge 65536 ] || burst=65536
  for ((i = 0; i < NETNS_COUNT; i++)); do
    tc qdisc replace dev "$(netns_veth "$i")" root tbf rate "$rate" burst "$burst" latency 100ms || return 1
    ip netns exec "$(netns_name "$i")" tc qdisc replace dev eth0 root tbf rate "$rate" burst "$burst" latency 100ms ||
      return 1
  done
}

# RATE in tc units -> bits per second.
netns_rate_bits() {
  local r="$1"
  case "$r" in
    *gbit) echo $((${r%gbit} * 1000000000)) ;;
    *mbit) echo $((${r%mbit} * 1000000)) ;;
    *kbit) echo $((${r%kbit} * 1000)) ;;
    *) echo "netns_limit: rate '$r' must end in gbit, mbit or kbit" >&2; return 1 ;;
  esac
}

netns_exec() {
  local i="$1"
  shift
  ip netns exec "$(netns_name "$i")" "$@"
}
