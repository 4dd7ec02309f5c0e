// Shared by the GPU tests: a visible skip on machines without a CUDA device, and comparisons of
// a CUDA result with the CPU kernel's.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/ops.h"
#include "cuda/device.h"

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

/// |a - b| <= atol + rtol * |b| elementwise (on the host in f64); NaN matches NaN, inf the same inf.
inline bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.sizes() != b.sizes()) return false;
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]))) continue;  // infinities too
    if (!(std::fabs(x[i] - y[i]) <= atol + rtol * std::fabs(y[i]))) return false;
  }
  return true;
}

/// The tolerance a dtype's kernels are held to against the CPU (STYLE.md).
inline double tolerance(DType t) {
  switch (t) {
    case kFloat16:
    case kBFloat16: return 1e-2;
    case kFloat32: return 1e-5;
    case kFloat64: return 1e-12;
    default: return 0;
  }
}

/// Uniform in [lo, hi), drawn in f64 and rounded to `dtype` (random, never all-zero inputs).
inline Tensor random_input(const Shape& shape, DType dtype, double lo, double hi) {
  return (rand(shape, kFloat64) * (hi - lo) + lo).to(dtype);
}

/// Elementwise: |a - b| <= tol (|b| + scale), scale the largest |b| (at least 1): sums over many
/// terms differ in order between the devices, so small entries are held to the big ones' error.
/// `a` may be on any device; `b` is on the CPU.
inline bool close_scaled(const Tensor& a, const Tensor& b, double tol) {
  auto x = a.to(kCPU).to_vector<double>(), y = b.to_vector<double>();
  if (x.size() != y.size()) return false;
  double scale = 1;
  for (double v : y) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || std::fabs(x[i] - y[i]) <= tol * (std::fabs(y[i]) + scale))) return false;
  return true;
}

}  // namespace kiln::test
