#!/usr/bin/env bash
# Where a build's time goes: tools/build_profile.sh [--warm] [TARGET...]   (default //...)
# Builds TARGETs cold (a fresh output base and no disk cache: nothing reused, as on a new
# machine) with Bazel's JSON trace profile, then prints the wall time, the 20 slowest actions and
# the critical path. --warm builds in this checkout's own output base with its disk cache instead.
# The profile stays in $KILN_BUILD_PROFILE (default /tmp/kiln_build_profile.json.gz) for
# chrome://tracing or ui.perfetto.dev.
set -uo pipefail
cd "$(dirname "$0")/.."
warm=0
[ "${1:-}" = --warm ] && { warm=1; shift; }
targets=("$@")
((${#targets[@]})) || targets=(//...)
profile=${KILN_BUILD_PROFILE:-/tmp/kiln_build_profile.json.gz}
startup=() flags=(--profile="$profile" --experimental_generate_json_trace_profile)
if [ "$warm" = 0 ]; then
  base=$(mktemp -d "${TMPDIR:-/tmp}/kiln_cold_base.XXXXXX")
  trap 'tools/bazel --output_base="$base" shutdown >/dev/null 2>&1; rm -rf "$base"' EXIT
  startup=(--output_base="$base")
  flags+=(--disk_cache=)
fi
# The CPU time of the build's actions: what Bazel's server reaped from its children (compilers,
# linkers, through the sandbox wrapper). Unlike the wall time it hardly depends on the other
# load on the machine, so it compares builds taken at different times.
server=$(tools/bazel "${startup[@]}" info server_pid 2>/dev/null)
children_cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.1f", ($16 + $17) / hz}' "/proc/$server/stat"; }
cpu0=$(children_cpu)
start=$SECONDS
tools/bazel "${startup[@]}" build "${flags[@]}" "${targets[@]}"
rc=$?
cpu=$(awk -v a="$(children_cpu)" -v b="$cpu0" 'BEGIN {printf "%.0f", a - b}')
echo "build_profile: $([ "$warm" = 1 ] && echo warm || echo cold) build of ${targets[*]}: exit $rc in $((SECONDS - start)) s, ${cpu} s of CPU in its actions; loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$profile" <<'EOF'
"""The slowest actions and the critical path from Bazel's JSON trace profile (Chrome trace
events: complete events "X" with microsecond "ts" and "dur")."""
import gzip
import json
import sys

with gzip.open(sys.argv[1], "rt") if sys.argv[1].endswith(".gz") else open(sys.argv[1]) as f:
    trace = json.load(f)
events = trace["traceEvents"] if isinstance(trace, dict) else trace
actions = [e for e in events if e.get("ph") == "X" and e.get("cat") == "action processing"]
critical = [e for e in events if e.get("ph") == "X" and e.get("cat") == "critical path component"]
print(f"\n{len(actions)} actions; the 20 slowest (s, what):")
for e in sorted(actions, key=lambda e: -e.get("dur", 0))[:20]:
    print(f"  {e['dur'] / 1e6:8.1f}  {e.get('name', '?')}")
if critical:
    total = sum(e.get("dur", 0) for e in critical) / 1e6
    print(f"\ncritical path: {total:.1f} s over {len(critical)} actions; the longest 10:")
    for e in sorted(critical, key=lambda e: -e.get("dur", 0))[:10]:
        print(f"  {e['dur'] / 1e6:8.1f}  {e.get('name', '?')}")
else:
    print("\n(no critical path in this profile: Bazel wrote none)")
EOF
exit "$rc"
