#!/usr/bin/env bash
# The AVX-512 unit (//core:avx512_kernels) must define no weak symbol outside its own namespaces
# (or templates instantiated with its own types): any shared template (Eigen's, the C++
# library's, core/cpu/vec8.h's) could be picked by the linker for AVX2-only code paths and put
# AVX-512 instructions on machines without them.
# Argument: `nm -C --defined-only` of //core:avx512_kernels's libraries (see tests/core/BUILD).
set -uo pipefail
syms="$1"
[ -s "$syms" ] || { echo "FAIL: symbol listing $syms is missing or empty"; exit 1; }
for f in kiln::cpu::sgemm_avx512 kiln::cpu::gelu_tanh_backward_f32_avx512; do
  grep -q "$f" "$syms" || { echo "FAIL: $f not defined"; exit 1; }
done
# A static initialiser in this unit would run at start-up on every CPU, AVX-512 or not.
if grep -q '_GLOBAL__sub_I' "$syms"; then
  echo "FAIL: the AVX-512 unit has a static initialiser:"
  grep '_GLOBAL__sub_I' "$syms"
  exit 1
fi
weak=$(awk '$2 ~ /^[WVu]$/' "$syms")
# DW.ref.__gxx_personality_v0 is a pointer to the C++ exception personality routine that every
# object file carries, the same bytes everywhere (data, not code): safe to merge.
leaks=$(grep -v -E 'kiln_eigen_avx512::|kiln::cpu::gemm_avx512::|kiln::cpu::avx512::| DW\.ref\.__gxx_personality_v0$' <<<"$weak" |
        grep -v '^$')
if [ -n "$leaks" ]; then
  echo "FAIL: weak symbols outside the AVX-512 namespaces:"
  echo "$leaks"
  exit 1
fi
echo "ok: $(grep -c . <<<"$weak") weak symbols, all in the AVX-512 namespaces"
