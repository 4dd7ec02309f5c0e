// Helpers for the mixed-precision tests: comparisons scaled to the reference's magnitude (the
// error of a 16-bit result is relative to the values it is made of, not to each element).
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/ops.h"
#include "tests/file_util.h"

namespace kiln::test {

/// max |a - b| / max(max |b|, tiny): one number to hold against a dtype's precision.
inline double scaled_error(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::fabs(x[i] - y[i]));
    scale = std::max(scale, std::fabs(y[i]));
  }
  return diff / scale;
}

}  // namespace kiln::test
