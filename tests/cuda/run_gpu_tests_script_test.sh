#!/usr/bin/env bash
# release/bundle/run_gpu_tests.sh on a fake bundle and a fake GPU host (no GPU needed): the Python
# comes from the PyTorch venv before PATH, Kiln's binaries get the bundle's lib/ and the venv's
# nvidia/*/lib wheels on LD_LIBRARY_PATH while the PyTorch scripts keep the host's (reaching
# Kiln's benchmarks through wrappers that set it), and --bench without PyTorch fails.
set -uo pipefail
script=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
tmp=${TEST_TMPDIR:-$(mktemp -d)}/run_gpu_tests_case
rm -rf "$tmp" && mkdir -p "$tmp"
failures=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok: $1"; else echo "FAIL: $1"; failures=$((failures + 1)); fi
}
has() { grep -q -- "$2" "$1"; }
lacks() { ! grep -q -- "$2" "$1"; }

bundle=$tmp/kiln_gpu_bundle
venv=$tmp/venv
sp=$venv/lib/python3.12/site-packages
mkdir -p "$bundle"/{tests,bench,scripts,lib/cuda-fallback} "$venv/bin" "$sp/nvidia/cudnn/lib" "$sp/nvidia/nccl/lib"
cp "$script" "$bundle/run_gpu_tests.sh" && chmod +x "$bundle/run_gpu_tests.sh"
out=$tmp/out && mkdir -p "$out"
# A Kiln binary: records its library path.
recorder() {
  printf '#!/usr/bin/env bash\necho "$LD_LIBRARY_PATH" > %q\n' "$out/$1.ldp" > "$2"
  chmod +x "$2"
}
recorder fake_test "$bundle/tests/fake_test"
recorder gemm_bench "$bundle/bench/gemm_bench"
recorder amp_bench "$bundle/bench/amp_bench"
recorder graph_bench "$bundle/bench/graph_bench"
recorder allreduce_bench "$bundle/bench/allreduce_bench"
touch "$bundle/scripts/allreduce_pytorch.py" "$bundle/scripts/gemm_vs_pytorch.py" "$bundle/scripts/amp_vs_pytorch.py" "$bundle/scripts/pytorch_amp.py" \
  "$bundle/scripts/graph_vs_pytorch.py" "$bundle/scripts/pytorch_graph.py"
# The venv's python3: answers site and torch queries; as a script runner, records its own library
# path and starts the Kiln benchmark it is given (as gemm_vs_pytorch.py does).
cat > "$venv/bin/python3" <<PY
#!/usr/bin/env bash
if [ "\$1" = -c ]; then
  case "\$2" in
    *"import site"*) echo "$sp" ;;
    *"import torch"*) exit "\${FAKE_NO_TORCH:-0}" ;;
  esac
  exit 0
fi
echo "\$LD_LIBRARY_PATH" > "$out/\$(basename "\$1").ldp"
shift
while [ \$# -gt 0 ]; do
  case "\$1" in --gemm-bench|--amp-bench|--graph-bench) "\$2" || exit 1; shift ;; esac
  shift
done
PY
chmod +x "$venv/bin/python3"

export KILN_TORCH_VENV=$venv LD_LIBRARY_PATH=/host/lib
unset PYTHON

"$bundle/run_gpu_tests.sh" > "$tmp/log1" 2>&1
check "the tests pass" test $? -eq 0
check "the venv's python is found first" has "$tmp/log1" "python: $venv/bin/python3"
check "a Kiln test sees the bundle's lib/" has "$out/fake_test.ldp" "$bundle/lib:"
check "a Kiln test sees the venv's cuDNN wheel" has "$out/fake_test.ldp" "$sp/nvidia/cudnn/lib"
check "a Kiln test sees the venv's NCCL wheel" has "$out/fake_test.ldp" "$sp/nvidia/nccl/lib"
check "the host's own path is kept last" has "$out/fake_test.ldp" "cuda-fallback:/host/lib"

"$bundle/run_gpu_tests.sh" --bench > "$tmp/log2" 2>&1
check "--bench with PyTorch passes" test $? -eq 0
check "the PyTorch script keeps the host's library path" test "$(cat "$out/gemm_vs_pytorch.py.ldp")" = /host/lib
check "the amp script keeps the host's library path" test "$(cat "$out/amp_vs_pytorch.py.ldp")" = /host/lib
check "the benchmark the script starts gets Kiln's path" has "$out/gemm_bench.ldp" "$bundle/lib:"
check "so does amp_bench" has "$out/amp_bench.ldp" "$sp/nvidia/cudnn/lib"
check "so does graph_bench, for the CUDA graph comparison" has "$out/graph_bench.ldp" "$bundle/lib:"
check "the 2-rank NCCL all-reduce gets Kiln's path" has "$out/allreduce_bench.ldp" "$bundle/lib:"
check "PyTorch's all-reduce keeps the host's path" test "$(cat "$out/allreduce_pytorch.py.ldp")" = /host/lib

FAKE_NO_TORCH=1 "$bundle/run_gpu_tests.sh" --bench > "$tmp/log3" 2>&1
check "--bench without PyTorch fails" test $? -ne 0
check "and says so in the summary" has "$tmp/log3" " 1 failed"
check "naming the missing PyTorch" has "$tmp/log3" "no PyTorch with CUDA"
FAKE_NO_TORCH=1 "$bundle/run_gpu_tests.sh" > "$tmp/log4" 2>&1
check "without --bench PyTorch is not needed" test $? -eq 0

if [ "$failures" -gt 0 ]; then
  for f in "$tmp"/log*; do echo "--- $f"; cat "$f"; done
fi
echo "$((18 - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
