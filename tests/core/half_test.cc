// f16 conversions: the F16C path (where the build has it) and the portable code agree on every
// half value and on a dense sample of floats, ties round to even, and out-of-range values go to
// infinity.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "core/half.h"

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
