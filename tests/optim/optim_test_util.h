// Helpers for optim tests: host vectors, closeness checks, and a parameter whose gradient comes
// from a real backward (loss = sum(w * p * p), so grad = 2 * w * p).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "autograd/autograd.h"

namespace kiln::optim_test {

using Vec = std::vector<double>;

inline Vec values(const Tensor& t) { return t.to_vector<double>(); }

inline void check_close(const Vec& got, const Vec& want, double rtol, double atol = 0) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK_MESSAGE(std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]), "element ", i, ": got ",
                  got[i], ", want ", want[i]);
}

// Initial values and loss weights used across tests (no zeros, mixed signs).
inline const Vec kP0 = {0.5, -1.25, 2.0, 0.75, -0.3, 1.1};
inline const Vec kW = {1.0, 0.5, -0.25, 2.0, 1.5, -0.75};

/// Clears p.grad and runs backward of sum(w * p * p) into it.
inline void backward_quadratic(Tensor& p) {
  p.set_grad(Tensor());
  Tensor w = tensor<double>(kW, p.sizes()).to(p.device(), p.dtype());
  (w * p * p).sum().backward();
}

/// The same gradient for the f64 reference: 2 * w * p.
inline Vec quadratic_grad(const Vec& p) {
  Vec g(p.size());
  for (size_t i = 0; i < g.size(); ++i) g[i] = 2 * kW[i] * p[i];
  return g;
}

}  // namespace kiln::optim_test
