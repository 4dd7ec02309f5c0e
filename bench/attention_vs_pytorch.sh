#!/usr/bin/env bash
# `tools/bazel run //bench:attention_vs_pytorch [-- --seqs 256,1024 --reps 5]`: see attention_vs_pytorch.py.
# --allow-load: report even from a loaded machine, marked "noisy" (bench/host_check.py).
set -euo pipefail
here="${RUNFILES_DIR:-$0.runfiles}/kiln"
exec python3 "$here/bench/attention_vs_pytorch.py" --attention-bench "$here/bench/attention_bench" "$@"
