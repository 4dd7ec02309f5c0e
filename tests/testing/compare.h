// The comparisons and random inputs every op test shares (the one copy: tests of core, autograd,
// nn, amp, cuda and the op database use these). All compare on the host in f64.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/grad_mode.h"
#include "core/ops.h"

namespace kiln::test {

/// |a - b| <= atol + rtol * |b| elementwise, same shapes; NaN matches NaN, inf the same inf.
inline bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-6) {
  if (a.sizes() != b.sizes()) return false;
  auto x = a.to(kCPU).to_vector<double>(), y = b.to(kCPU).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]))) continue;
    if (!(std::fabs(x[i] - y[i]) <= atol + rtol * std::fabs(y[i]))) return false;
  }
  return true;
}

/// |a - b| <= tol * (1 + |b|) elementwise, same shapes; a NaN on either side never matches. Two
/// undefined tensors (gradients never produced) match each other and nothing else.
inline bool close(const Tensor& a, const Tensor& b, double tol = 1e-6) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  if (a.sizes() != b.sizes()) return false;
  auto x = a.to(kCPU).to_vector<double>(), y = b.to(kCPU).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::fabs(x[i] - y[i]) <= tol * (1 + std::fabs(y[i])))) return false;
  return true;
}

/// max |a - b| (0 for empty tensors; NaN if either holds one). Shapes must broadcast.
inline double max_diff(const Tensor& a, const Tensor& b) {
  auto d = (a.to(kCPU).to(kFloat64) - b.to(kCPU).to(kFloat64)).to_vector<double>();
  double m = 0;
  for (double v : d) {
    if (std::isnan(v)) return v;
    m = std::max(m, std::fabs(v));
  }
  return m;
}

/// max |a - b| / max(max |b|, 1): the error of a sum over many terms held to the largest term.
inline double rel_diff(const Tensor& a, const Tensor& b) {
  auto y = b.to(kCPU).to_vector<double>();
  double scale = 1;
  for (double v : y) scale = std::max(scale, std::fabs(v));
  return max_diff(a, b) / scale;
}

/// max |a - b| / max(max |b|, tiny): one number to hold against a dtype's precision (the error of
/// a 16-bit result is relative to the values it is made of, not to each element).
inline double scaled_error(const Tensor& a, const Tensor& b) {
  REQUIRE(a.sizes() == b.sizes());
  auto x = a.to(kCPU).to_vector<double>(), y = b.to(kCPU).to_vector<double>();
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::fabs(x[i] - y[i]));
    scale = std::max(scale, std::fabs(y[i]));
  }
  return diff / scale;
}

/// Elementwise |a - b| <= tol (|b| + scale), scale the largest |b| (at least 1): sums over many
/// terms differ in order between devices, so small entries are held to the big ones' error.
inline bool close_scaled(const Tensor& a, const Tensor& b, double tol) {
  auto x = a.to(kCPU).to_vector<double>(), y = b.to(kCPU).to_vector<double>();
  if (x.size() != y.size()) return false;
  double scale = 1;
  for (double v : y) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || std::fabs(x[i] - y[i]) <= tol * (std::fabs(y[i]) + scale))) return false;
  return true;
}

/// The tolerance a dtype's kernels are held to against the reference (STYLE.md).
inline double tolerance(DType t) {
  switch (t) {
    case kFloat16:
    case kBFloat16: return 1e-2;
    case kFloat32: return 1e-5;
    case kFloat64: return 1e-12;
    default: return 0;
  }
}

/// Uniform in [lo, hi), drawn in f64 (from `gen`, or the global generator) and rounded to `dtype`:
/// random, never all-zero inputs.
inline Tensor uniform(const Shape& shape, DType dtype = kFloat64, double lo = -1, double hi = 1,
                      Generator* gen = nullptr) {
  return (rand(shape, kFloat64, gen) * (hi - lo) + lo).to(dtype).contiguous();
}

/// A contiguous f64 leaf requiring grad, uniform in [lo, hi).
inline Tensor leaf(const Shape& shape, double lo = -1.0, double hi = 1.0) {
  return uniform(shape, kFloat64, lo, hi).set_requires_grad(true);
}

/// The same values in a non-contiguous layout: every other element of a buffer twice as wide.
inline Tensor non_contiguous(const Tensor& t) {
  Shape wide = t.sizes();
  if (wide.empty()) return t;
  wide.back() *= 2;
  Tensor buf = zeros(wide, TensorOptions(t.dtype()).device(t.device()));
  Tensor v = buf.slice(-1, 0, wide.back(), 2);
  {
    NoGradGuard g;
    v.copy_(t);
  }
  return v;
}

}  // namespace kiln::test

#define CHECK_ALLCLOSE(a, b, ...) CHECK_MESSAGE(::kiln::test::allclose(a, b, ##__VA_ARGS__), (a).str(), "\nvs\n", (b).str())
