// f16 conversions: the F16C path (where the build has it) and the portable code agree on every
// half value and on a dense sample of floats, ties round to even, and out-of-range values go to
// infinity.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/half.h"
#include "core/half_array.h"

using kiln::Half;
using kiln::bits_float;
using kiln::float_bits;

TEST_CASE("every half widens to the same float on both paths") {
  for (uint32_t h = 0; h <= 0xffffu; ++h) {
    const float a = Half::to_float(static_cast<uint16_t>(h)), b = Half::to_float_portable(static_cast<uint16_t>(h));
    if (std::isnan(b)) {
      CHECK(std::isnan(a));
      continue;
    }
    if (float_bits(a) != float_bits(b)) FAIL_CHECK("half ", h, ": ", a, " vs ", b);
  }
}

TEST_CASE("floats narrow to the same half on both paths (every 1021st bit pattern)") {
  int64_t checked = 0;
  for (uint64_t u = 0; u <= 0xffffffffu; u += 1021) {
    const float f = bits_float(static_cast<uint32_t>(u));
    const uint16_t a = Half::from_float(f), b = Half::from_float_portable(f);
    if (std::isnan(f)) {
      CHECK((a & 0x7c00u) == 0x7c00u);
      CHECK((a & 0x03ffu) != 0);
      continue;
    }
    if (a != b) FAIL_CHECK("float bits ", u, " (", f, "): ", a, " vs ", b);
    ++checked;
  }
  CHECK(checked > 4000000);
}

TEST_CASE("round to nearest even, subnormals, overflow") {
  // Halfway between 1 and the next half (1 + 2^-10): ties go to the even mantissa (1).
  CHECK(Half::from_float(1.0f + 0.5f / 1024) == 0x3c00u);
  CHECK(Half::from_float(1.0f + 1.5f / 1024) == 0x3c02u);  // tie between 0x3c01 and 0x3c02: even
  CHECK(Half::from_float(5.960464477539063e-08f) == 0x0001u);  // 2^-24, the smallest subnormal
  CHECK(Half::from_float(2.0e-8f) == 0x0000u);                  // below half of it
  CHECK(Half::from_float(65504.0f) == 0x7bffu);                 // the largest half
  CHECK(Half::from_float(65520.0f) == 0x7c00u);                 // rounds up to inf
  CHECK(Half::from_float(-1.0e9f) == 0xfc00u);
  for (uint16_t h : {uint16_t{0x0001}, uint16_t{0x03ff}, uint16_t{0x3555}, uint16_t{0xbbff}, uint16_t{0x7bff}})
    CHECK(Half::from_float(Half::to_float(h)) == h);  // exact round trip
}

TEST_CASE("the array conversions give the one-element conversions' bits (every float near f16's range)") {
  // Every pattern (ties, every sticky-bit combination, both signs) whose exponent lies where f16
  // has subnormals, normals and overflow, and bf16's subnormals, inf and NaN payloads; every
  // 61st batch of 4096 elsewhere. Odd batches pass n = 4095 and so also run the scalar tail.
  constexpr int64_t kBatch = 4096;
  std::vector<float> src(kBatch);
  std::vector<Half> h(kBatch);
  std::vector<kiln::BFloat16> b(kBatch);
  int64_t bad_half = 0, bad_bf16 = 0;
  int64_t checked = 0;
  for (uint64_t base = 0; base <= 0xffffffffu; base += kBatch) {
    const uint32_t exponent = (base >> 23) & 0xffu;
    const bool dense = (exponent >= 0x60 && exponent <= 0x90) || exponent == 0 || exponent == 0xff;
    if (!dense && (base / kBatch) % 61 != 0) continue;
    checked += kBatch;
    for (int64_t i = 0; i < kBatch; ++i) src[i] = bits_float(static_cast<uint32_t>(base + i));
    const int64_t n = (base / kBatch) % 2 ? kBatch - 1 : kBatch;
    kiln::float_to_half(src.data(), h.data(), n);
    kiln::float_to_bfloat16(src.data(), b.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t want_h = Half::from_float(src[i]), want_b = kiln::BFloat16(src[i]).x;
      if (h[i].x != want_h && bad_half++ < 5) FAIL_CHECK("f16: float bits ", base + i, ": ", h[i].x, " vs ", want_h);
      if (b[i].x != want_b && bad_bf16++ < 5) FAIL_CHECK("bf16: float bits ", base + i, ": ", b[i].x, " vs ", want_b);
    }
  }
  CHECK(bad_half == 0);
  CHECK(bad_bf16 == 0);
  CHECK(checked > (int64_t{52} << 24));
}

TEST_CASE("bfloat16 rounds to nearest even, NaN stays NaN") {
  CHECK(kiln::BFloat16(bits_float(0x3f808000u)).x == 0x3f80u);  // tie, even below
  CHECK(kiln::BFloat16(bits_float(0x3f818000u)).x == 0x3f82u);  // tie, even above
  CHECK(kiln::BFloat16(bits_float(0x3f808001u)).x == 0x3f81u);  // above the tie
  CHECK(kiln::BFloat16(bits_float(0x00008000u)).x == 0x0000u);  // subnormal tie to even zero
  CHECK(kiln::BFloat16(bits_float(0x7f7fffffu)).x == 0x7f80u);  // the largest float rounds to inf
  CHECK(kiln::BFloat16(bits_float(0xffc00001u)).x == 0x7fc0u);  // NaN
  float four[9] = {1.0f, bits_float(0x3f808000u), bits_float(0x3f818000u), bits_float(0x7fc00000u), -2.5f,
                   bits_float(0x00008000u), bits_float(0x7f7fffffu), bits_float(0x80018000u), 3.0f};
  kiln::BFloat16 out[9];
  kiln::float_to_bfloat16(four, out, 9);
  for (int i = 0; i < 9; ++i) CHECK(out[i].x == kiln::BFloat16(four[i]).x);
}
