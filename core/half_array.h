// Float arrays to f16 / bf16, 8 elements per instruction with F16C / AVX2, giving exactly the bits
// of the one-element conversions in core/half.h, so where an element falls in a kernel's split
// never changes its value (tests/core/half_test.cc checks every float). Apart from half.h so that
// only the kernels that convert arrays pay for <immintrin.h>.
#pragma once

#include <cstdint>

#include "core/half.h"

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace kiln {

/// dst[i] = Half(src[i]) for i < n, bit for bit, 8 at a time with F16C.
inline void float_to_half(const float* src, Half* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  // Immediate 0: round to nearest even, as _cvtss_sh in Half::from_float (not MXCSR's mode).
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), 0));
#endif
  for (; i < n; ++i) dst[i] = Half(src[i]);
}

/// dst[i] = BFloat16(src[i]) for i < n, bit for bit (the same integer rounding, NaN to 0x7fc0),
/// 8 at a time with AVX2.
inline void float_to_bfloat16(const float* src, BFloat16* dst, int64_t n) {
  int64_t i = 0;
#if defined(__AVX2__)
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i bias = _mm256_set1_epi32(0x7fff), one = _mm256_set1_epi32(1), qnan = _mm256_set1_epi32(0x7fc0);
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);  // both operands >= 0
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(bias, odd)), 16);
    r = _mm256_blendv_epi8(r, qnan, nan);
    // Pack the 8 32-bit lanes (each < 2^16) to 16 bits; packus works per 128-bit half.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(packed));
  }
#endif
  for (; i < n; ++i) dst[i] = BFloat16(src[i]);
}

}  // namespace kiln
