// Shared by the GPU tests: a visible skip on machines without a CUDA device. The comparisons
// (allclose, close_scaled, tolerance, uniform) are the op tests' shared ones, tests/testing/compare.h.
#pragma once

#include <doctest/doctest.h>

#include <cstdio>

#include "core/ops.h"
#include "cuda/device.h"
#include "tests/testing/compare.h"

namespace kiln::test {

/// True (after saying so on stdout and in doctest's log) when there is no CUDA device.
inline bool skip_without_gpu() {
  if (cuda::device_count() > 0) return false;
  std::printf("skipped: no CUDA device (%s)\n", doctest::getContextOptions()->currentTest->m_name);
  MESSAGE("skipped: no CUDA device");
  return true;
}

#define KILN_REQUIRE_GPU() \
  do {                     \
    if (::kiln::test::skip_without_gpu()) return; \
  } while (0)

/// Uniform in [lo, hi), drawn in f64 and rounded to `dtype` (random, never all-zero inputs).
inline Tensor random_input(const Shape& shape, DType dtype, double lo, double hi) { return uniform(shape, dtype, lo, hi); }

}  // namespace kiln::test
