// Gradients at the points where an op is not differentiable, chosen as PyTorch chooses them
// (finite differences cannot check these, so they are pinned by hand). The elementwise kinks
// (clamp and its tensor bounds, maximum/minimum ties, hardswish at ±3, relu, ...) are pinned rows
// of the op database (tests/testing/op_db_elementwise.cc), compared with PyTorch itself too.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/autograd.h"

using namespace kiln;

TEST_CASE("the 2-norm and 3-norm of a zero vector have gradient 0, not NaN") {
  for (double p : {2.0, 3.0}) {
    Tensor z = zeros({3}, kFloat64).set_requires_grad(true);
    linalg::vector_norm(z, p).backward();
    CHECK(z.grad().to_vector<double>() == std::vector<double>{0, 0, 0});
  }
}
