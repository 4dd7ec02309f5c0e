// Helpers for gradient tests: random f64 leaves and a gradcheck assertion.
#pragma once

#include <doctest/doctest.h>

#include <vector>

#include "autograd/autograd.h"

namespace kiln::test {

/// A contiguous f64 leaf requiring grad, uniform in [lo, hi).
inline Tensor leaf(const Shape& shape, double lo = -1.0, double hi = 1.0) {
  return (rand(shape, kFloat64) * (hi - lo) + lo).contiguous().set_requires_grad(true);
}

using Inputs = const std::vector<Tensor>&;

}  // namespace kiln::test

/// CHECK_GRAD(fn, inputs...): fn's backward agrees with f64 finite differences.
#define CHECK_GRAD(fn, ...)                                     \
  do {                                                          \
    auto r = ::kiln::autograd::gradcheck(fn, {__VA_ARGS__});    \
    CHECK_MESSAGE(r.ok, r.message);                             \
  } while (0)
