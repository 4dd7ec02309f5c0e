// The gradcheck assertion of the gradient tests (random leaves: tests/testing/compare.h's leaf).
#pragma once

#include <doctest/doctest.h>

#include <vector>

#include "autograd/autograd.h"
#include "tests/testing/compare.h"

namespace kiln::test {

using Inputs = const std::vector<Tensor>&;

}  // namespace kiln::test

/// CHECK_GRAD(fn, inputs...): fn's backward agrees with f64 finite differences.
#define CHECK_GRAD(fn, ...)                                     \
  do {                                                          \
    auto r = ::kiln::autograd::gradcheck(fn, {__VA_ARGS__});    \
    CHECK_MESSAGE(r.ok, r.message);                             \
  } while (0)
