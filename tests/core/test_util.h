// Helpers shared by core tests: f64 reference comparisons on random inputs.
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/ops.h"

namespace kiln::test {

/// Max |a - b| <= atol + rtol * |b| elementwise (both converted to f64 on the host).
inline bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-6) {
  if (a.sizes() != b.sizes()) return false;
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (!(std::fabs(x[i] - y[i]) <= atol + rtol * std::fabs(y[i]))) return false;
  }
  return true;
}

/// |a - b| <= tol * (1 + |b|) elementwise, same shapes; a NaN on either side never matches (the
/// f64 reference comparisons of the layer and loss tests).
inline bool close(const Tensor& a, const Tensor& b, double tol) {
  if (a.sizes() != b.sizes()) return false;
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::fabs(x[i] - y[i]) <= tol * (1 + std::fabs(y[i])))) return false;
  return true;
}

#define CHECK_ALLCLOSE(a, b, ...) CHECK_MESSAGE(::kiln::test::allclose(a, b, ##__VA_ARGS__), (a).str(), "\nvs\n", (b).str())

}  // namespace kiln::test
