#!/usr/bin/env bash
# The README's set-up on a fresh minimal Debian 12, as a new user meets it:
#   sudo tools/fresh_machine_check.sh [ROOT_DIR]      (default /var/tmp/kiln-fresh-root)
# makes a minimal Debian 12 root (`debootstrap --variant=minbase bookworm`, from the first Debian
# mirror this machine's apt uses), clones this repository's committed HEAD into it, and runs the
# README's two commands there in a chroot, cold (no Bazel cache, no packages beyond minbase):
#   tools/bazel run //examples:mnist      tools/bazel test //...
# printing each one's wall time and result, and ending with "N passed, N failed" over the two.
# Each command's full output is kept in ROOT_DIR/root/*.log (the root's Bazel caches are removed at the end). Needs root (debootstrap, chroot,
# mounts) and the network to Debian's mirror; installs debootstrap on the host when missing.
# Nothing of the host's CUDA toolkit is visible inside, so this checks the CPU build.
set -uo pipefail
root=${1:-/var/tmp/kiln-fresh-root}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "fresh_machine_check: needs root (debootstrap, chroot)" >&2; exit 2; }

mirror=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
  2>/dev/null | grep -v security | head -1 | awk '{print $2}')
mirror=${mirror:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap; } ||
  { echo "fresh_machine_check: cannot install debootstrap" >&2; exit 1; }

unmount() {
  for m in dev/pts dev proc sys; do umount -l "$root/$m" 2>/dev/null; done
}
trap unmount EXIT
unmount
rm -rf "$root"
mkdir -p "$root"
start=$SECONDS
echo "fresh_machine_check: debootstrap --variant=minbase bookworm $root $mirror"
if ! debootstrap --variant=minbase bookworm "$root" "$mirror" > "$root.debootstrap.log" 2>&1; then
  echo "fresh_machine_check: debootstrap failed: $(tail -3 "$root.debootstrap.log")" >&2
  exit 1
fi
echo "fresh_machine_check: minimal root made in $((SECONDS - start)) s"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# This network's trust, not a package: where the host's pip is told to trust a CA bundle (a proxy
# that re-signs TLS, as on these build machines), the root gets the same bundle and setting, so
# the tests that install from PyPI reach it as they do on the host.
# (Its own path: a ca-certificates package installed later rewrites the system bundle.)
bundle=$(sed -n 's/^ *cert *= *//p' /etc/pip.conf 2>/dev/null | head -1)
if [ -n "$bundle" ] && [ -f "$bundle" ]; then
  cp -L "$bundle" "$root/etc/host-network-ca.crt"
  printf '[global]\ncert = /etc/host-network-ca.crt\n' > "$root/etc/pip.conf"
fi
mount -t proc proc "$root/proc" && mount --rbind /sys "$root/sys" && mount --rbind /dev "$root/dev" || {
  echo "fresh_machine_check: cannot mount /proc, /sys, /dev in $root" >&2
  exit 1
}
# The committed HEAD, as a user's clone would hold it (no build outputs, no uncommitted files).
git clone -q "$repo" "$root/root/kiln" || { echo "fresh_machine_check: git clone failed" >&2; exit 1; }

passed=0 failed=0
run_in_root() {  # run_in_root NAME COMMAND: COMMAND in the clone, as root in the chroot
  local name=$1 cmd=$2 t0=$SECONDS rc
  echo "==== $name: $cmd"
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 bash -c "cd /root/kiln && $cmd" > "$root/root/$name.log" 2>&1
  rc=$?
  tail -3 "$root/root/$name.log"
  if [ "$rc" = 0 ]; then
    passed=$((passed + 1))
    echo "---- $name passed in $((SECONDS - t0)) s"
  else
    failed=$((failed + 1))
    echo "---- $name FAILED (exit $rc) in $((SECONDS - t0)) s; output in $root/root/$name.log"
    grep -E "^FAIL|FAILED|ERROR" "$root/root/$name.log" | head -20
  fi
}
run_in_root mnist "tools/bazel run //examples:mnist"
run_in_root test "tools/bazel test //..."
# The root's Bazel output and caches (several GB) are not needed once the logs are read: they
# filled a shared disk once. The logs in ROOT_DIR/root/*.log stay.
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c "cd /root/kiln && tools/bazel shutdown" >/dev/null 2>&1
rm -rf "$root/root/.cache" "$root/root/kiln/bazel-"* "$root/var/cache/apt/archives/"*.deb
echo "${passed} passed, ${failed} failed"
[ "$failed" = 0 ]
