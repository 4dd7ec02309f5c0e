#!/usr/bin/env bash
# Builds and runs tests/consumer, a separate Bazel workspace that depends on Kiln through
# local_repository (see its WORKSPACE), with Kiln's tools/bazel. Exits 0 when its program trained
# (the loss fell by 10x). Run from anywhere: tests/consumer/run.sh. .ci/run calls it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
# Its own output base (the workspace differs), its own server; shut down when done so the
# server does not keep memory on a small CI machine.
trap '"$here/../../tools/bazel" shutdown >/dev/null 2>&1 || true' EXIT
"$here/../../tools/bazel" test --test_output=all //:train_mlp
