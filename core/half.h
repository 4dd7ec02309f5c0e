// 16-bit floating types stored as raw bits: IEEE half (f16) and bfloat16 (bf16).
// Arithmetic converts to float; conversions round to nearest even, NaN stays NaN. f16 converts
// with the F16C instructions where the build has them (x86-64-v3 does): every f16 kernel on the
// CPU converts each element it touches, and the portable bit-twiddling below costs ~20x more.
// The array conversions at the end (8 elements per instruction) give exactly the bits of the
// one-element ones, so where an element falls in a kernel's split never changes its value
// (tests/core/half_test.cc checks every float).
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__F16C__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace kiln {

inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

struct BFloat16 {
  uint16_t x = 0;
  BFloat16() = default;
  BFloat16(float f) {  // NOLINT: implicit like a built-in float type
    uint32_t u = float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) { x = 0x7fc0; return; }  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    x = static_cast<uint16_t>(u >> 16);
  }
  operator float() const { return bits_float(static_cast<uint32_t>(x) << 16); }
};

struct Half {
  uint16_t x = 0;
  Half() = default;
  Half(float f) { x = from_float(f); }  // NOLINT
  operator float() const { return to_float(x); }

  static uint16_t from_float(float f) {
#if defined(__F16C__)
    return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
#else
    return from_float_portable(f);
#endif
  }
  static float to_float(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    return to_float_portable(h);
#endif
  }

  // The same conversions in portable code (identical results, but a NaN's payload: these give
  // the canonical quiet NaN).
  static uint16_t from_float_portable(float f) {
    uint32_t u = float_bits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    u &= 0x7fffffffu;
    if (u > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
    if (u >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
    if (u < 0x38800000u) {  // subnormal half (or zero): scale by 2^24 and round
      float a = bits_float(u) * 16777216.0f;  // exact: a < 2^10 fits in the mantissa
      uint32_t m = static_cast<uint32_t>(a);
      float rem = a - static_cast<float>(m);
      if (rem > 0.5f || (rem == 0.5f && (m & 1u))) ++m;
      return static_cast<uint16_t>(sign | m);
    }
    uint32_t mant_odd = (u >> 13) & 1u;
    u += 0xc8000fffu + mant_odd;  // re-bias exponent (-112 << 23) and round to nearest even
    return static_cast<uint16_t>(sign | (u >> 13));
  }
  static float to_float_portable(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
      float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
      return sign ? -v : v;
    }
    return bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  }
};

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
