# Sourced by the tests tagged `pypi`: one way to get a PyPI venv with the modules a test needs.
#
#   source tests/testing/pypi_venv.sh
#   py=$(kiln_pypi_venv "$venv" torch=torch numpy=numpy safetensors=safetensors) || exit 1
#
# Each argument is MODULE=PIP_SPEC: the module is imported to see whether it is there and, when it
# is not, PIP_SPEC is installed. The venv is made on first use. Everything happens under an
# exclusive lock (flock on VENV.lock), so the `pypi` tests that Bazel runs two at a time never
# create or pip-install into one venv at once: the second waits and then finds the modules there.
# On failure it names the venv and the package, shows pip's last lines, and returns 1.
# kiln_venv_dir NAME gives the default place: ~/.cache/kiln/NAME of the real home (Bazel sets
# $HOME to the test's temporary directory).

kiln_venv_dir() {
  local real_home
  real_home=$(getent passwd "$(id -u)" | cut -d: -f6)
  echo "$real_home/.cache/kiln/$1"
}

kiln_pypi_venv() {
  local venv=$1
  shift
  local py=$venv/bin/python3 log status=0 fd spec module
  mkdir -p "$(dirname "$venv")" || { echo "cannot create $(dirname "$venv")" >&2; return 1; }
  if ! { exec {fd}>"$venv.lock"; } 2>/dev/null; then
    echo "cannot create the lock file $venv.lock" >&2
    return 1
  fi
  flock "$fd"
  log=$(mktemp)
  if ! "$py" -c 'import sys' 2>/dev/null; then
    echo "setting up a venv at $venv (first use)" >&2
    python3 -m venv "$venv" >"$log" 2>&1 || {
      echo "cannot create the venv $venv (Debian's python3-venv):" >&2
      status=1
    }
  fi
  for spec in "$@"; do
    [ "$status" -eq 0 ] || break
    module=${spec%%=*}
    "$py" -c "import $module" 2>/dev/null && continue
    echo "installing ${spec#*=} from PyPI into $venv" >&2
    "$py" -m pip install -q "${spec#*=}" >"$log" 2>&1 || {
      echo "cannot install ${spec#*=} from PyPI into $venv:" >&2
      status=1
    }
  done
  [ "$status" -eq 0 ] || tail -5 "$log" >&2
  flock -u "$fd"
  exec {fd}>&-
  rm -f "$log"
  [ "$status" -eq 0 ] && echo "$py"
  return "$status"
}
