// gelu_tanh_vec.h's loops at 16 lanes, for CPUs with AVX-512 (compiled with -march=x86-64-v4 in
// //core:avx512_kernels, called only where use_avx512()). On Zen 4, whose 512-bit operations take
// the same cycles as two 256-bit ones, the half-as-many instructions still help: the loops are
// compute-bound (one exp and one divide per element), about 1.5x (gradient) and 1.35x (forward)
// as fast as the 8-lane build on data in cache; on core_bench's 16M elements, read from memory,
// gelu_tanh 31.5 -> 35.0 GB/s and gelu_tanh_backward 27.3 -> 31.3 GB/s. Every template below is
// instantiated with avx512::Lanes16, so no symbol of this unit can stand in for baseline code at
// link time (//tests/core:avx512_isolation_test).
#include <immintrin.h>

#include "core/cpu/gelu_tanh_vec.h"

namespace kiln::cpu {
namespace avx512 {

struct Lanes16 {
  typedef float F __attribute__((vector_size(64)));
  typedef int32_t I __attribute__((vector_size(64)));
  static constexpr int64_t kW = 16;
  static F fmadd(F a, F b, F c) { return (F)_mm512_fmadd_ps((__m512)a, (__m512)b, (__m512)c); }
  // The second operand where either is NaN, as the 8-lane versions: a NaN v is kept.
  static F at_least(F v, F lo) { return (F)_mm512_max_ps((__m512)lo, (__m512)v); }
  static F at_most(F v, F hi) { return (F)_mm512_min_ps((__m512)hi, (__m512)v); }
};

}  // namespace avx512

void gelu_tanh_f32_avx512(float* out, const float* in, int64_t m) { gelu_tanh_v<avx512::Lanes16>(out, in, m); }

void gelu_tanh_backward_f32_avx512(float* out, const float* g, const float* xs, int64_t m) {
  gelu_tanh_backward_v<avx512::Lanes16>(out, g, xs, m);
}

}  // namespace kiln::cpu
