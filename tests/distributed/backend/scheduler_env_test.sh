#!/usr/bin/env bash
# init_process_group() from a scheduler's environment, for real: two env_worker processes with
# Slurm's srun variables set by hand (no Slurm here), then two started by Debian's Open MPI
# `mpirun`. Argument: the env_worker binary.
set -uo pipefail
worker="$PWD/$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/scheduler_env_test"
rm -rf "$tmp" && mkdir -p "$tmp"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
expect_contains() {  # file, text, what
  grep -qF -- "$2" "$1" || { fail "$3: expected '$2' in $1:"; sed 's/^/    /' "$1"; }
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Nothing a launcher would set may leak in.
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT

echo "== srun's variables (set by hand): rank, size, local id, master from a compressed node list"
port=$(free_port)
for r in 0 1; do
  env SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r SLURM_TASKS_PER_NODE='2(x1)' \
      SLURM_NODELIST='127.0.0.1,node[02-04,07]' MASTER_PORT=$port timeout 120 "$worker" >"$tmp/slurm$r" 2>&1 &
done
wait
expect_contains "$tmp/slurm0" "rank 0 of 2 local 0 master 127.0.0.1:$port sum 3" "slurm rank 0"
expect_contains "$tmp/slurm1" "rank 1 of 2 local 1 master 127.0.0.1:$port sum 3" "slurm rank 1"

echo "== a bad node list is named in the error"
env SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_NODELIST='node[03-01]' timeout 60 "$worker" >"$tmp/bad" 2>&1
expect_contains "$tmp/bad" "Slurm node list 'node[03-01]': range 03-01 runs backwards" "bad node list"

echo "== Open MPI's mpirun"
if ! command -v mpirun >/dev/null; then
  fail "mpirun is not installed: install Debian's openmpi-bin (tools/bazel installs it)"
else
  port=$(free_port)
  MASTER_PORT=$port timeout 180 mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_PORT \
    "$worker" >"$tmp/mpi" 2>&1 || fail "mpirun exited with $?"
  expect_contains "$tmp/mpi" "rank 0 of 2 local 0 master 127.0.0.1:$port sum 3" "mpirun rank 0"
  expect_contains "$tmp/mpi" "rank 1 of 2 local 1 master 127.0.0.1:$port sum 3" "mpirun rank 1"
fi

if ((failures)); then echo "$failures check(s) failed"; exit 1; fi
echo "all scheduler environment checks passed"
