// Gradients at the points where an op is not differentiable, chosen as PyTorch chooses them
// (finite differences cannot check these, so they are pinned here by hand).
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/autograd.h"

using namespace kiln;

TEST_CASE("clamp with tensor bounds: a tie splits the gradient between x and the bound (PyTorch 2.15)") {
  Tensor a = tensor({1.0, 2.0}, kFloat64).set_requires_grad(true);
  Tensor lo = tensor({1.0, 0.0}, kFloat64).set_requires_grad(true);
  clamp(a, lo, Tensor()).sum().backward();
  CHECK(a.grad().to_vector<double>() == std::vector<double>{0.5, 1});
  CHECK(lo.grad().to_vector<double>() == std::vector<double>{0.5, 0});
  // With both bounds, a NaN result stays NaN and sends the whole gradient to x.
  Tensor n = tensor({NAN, 0.5}, kFloat64).set_requires_grad(true);
  Tensor y = clamp(n, tensor({0.0}, kFloat64), tensor({1.0}, kFloat64));
  CHECK(std::isnan(y.to_vector<double>()[0]));
  y.sum().backward();
  CHECK(n.grad().to_vector<double>() == std::vector<double>{1, 1});
}

TEST_CASE("the 2-norm and 3-norm of a zero vector have gradient 0, not NaN") {
  for (double p : {2.0, 3.0}) {
    Tensor z = zeros({3}, kFloat64).set_requires_grad(true);
    linalg::vector_norm(z, p).backward();
    CHECK(z.grad().to_vector<double>() == std::vector<double>{0, 0, 0});
  }
}
