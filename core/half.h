// 16-bit floating types stored as raw bits: IEEE half (f16) and bfloat16 (bf16).
// Arithmetic converts to float; conversions round to nearest even, NaN stays NaN. f16 converts
// with the F16C instructions where the build has them (x86-64-v3 does): every f16 kernel on the
// CPU converts each element it touches, and the portable bit-twiddling below costs ~20x more.
// The array conversions (core/half_array.h) give exactly the bits of these one-element ones.
// Every translation unit includes this header (through core/dtype.h), so it calls the F16C
// instructions through the compiler builtins <immintrin.h> wraps: that header alone costs about
// 0.6 s of compile time per file, a tenth of a cold build.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

namespace kiln {

#if defined(__F16C__)
namespace detail {
// The operand types of GCC's and Clang's F16C builtins (<immintrin.h>'s __v4sf and __v8hi).
typedef float F16cFloat4 __attribute__((vector_size(16)));
typedef short F16cShort8 __attribute__((vector_size(16)));
}  // namespace detail
#endif

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
    // _cvtss_sh(f, 0): vcvtps2ph with immediate 0, round to nearest even (not MXCSR's mode).
    const detail::F16cShort8 h = __builtin_ia32_vcvtps2ph(detail::F16cFloat4{f, 0, 0, 0}, 0);
    return static_cast<uint16_t>(h[0]);
#else
    return from_float_portable(f);
#endif
  }
  static float to_float(uint16_t h) {
#if defined(__F16C__)
    // _cvtsh_ss(h): vcvtph2ps, exact.
    const detail::F16cFloat4 f = __builtin_ia32_vcvtph2ps(detail::F16cShort8{static_cast<short>(h), 0, 0, 0, 0, 0, 0, 0});
    return f[0];
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

}  // namespace kiln
