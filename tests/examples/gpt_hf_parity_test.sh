#!/usr/bin/env bash
# Hugging Face GPT-2 parity, with nothing downloaded but PyPI packages: transformers builds a random
# GPT2LMHeadModel and saves it (safetensors); Kiln loads it and matches its logits and loss (1e-4,
# f32); Kiln saves it back and transformers reloads that and matches again.
# PyTorch and transformers come from PyPI into $KILN_TORCH_VENV (default ~/.cache/kiln/torch-venv
# of the real home, the benchmarks' environment), installed on first use by tests/testing/pypi_venv.sh.
# The test is tagged `pypi`: when PyPI cannot be reached it fails and says why.
set -uo pipefail
check_bin="$1"
fixture="$2"
gpt="$3"
source tests/testing/pypi_venv.sh

venv="${KILN_TORCH_VENV:-$(kiln_venv_dir torch-venv)}"
py=$(kiln_pypi_venv "$venv" torch=torch numpy=numpy transformers=transformers) ||
  { echo "gpt_hf_parity_test: no PyTorch with transformers in $venv" >&2; exit 1; }

work="${TEST_TMPDIR:-$(mktemp -d)}/gpt_hf"
rm -rf "$work" && mkdir -p "$work"
set -e
"$py" "$fixture" make "$work/hf"
"$check_bin" "$work/hf" "$work/kiln"
"$py" "$fixture" check "$work/kiln" "$work/hf/expected.json"
# The trainer: --init-from-hf starts from the fixture, --save-hf writes what HF loads again.
for i in $(seq 1 1600); do echo "The quick brown fox jumps over the lazy dog. A stitch in time saves nine."; done \
  > "$work/corpus.txt"
"$gpt" --init-from-hf "$work/hf" --data "$work/corpus.txt" --batch-size 2 --max-steps 2 --warmup-steps 1 \
  --eval-batches 1 --sample-tokens 8 --save-hf "$work/trained" | tee "$work/train.log"
grep -q '"model":"hf".*"vocab_size":300' "$work/train.log"
"$py" "$fixture" load "$work/trained"
echo "PASSED: Hugging Face GPT-2 logits and loss match both ways; the trainer starts from and saves HF weights"
