// op::batch_norm's backward (the fused kernel formula) against f64 central differences: 2-D
// [N, C], 3-D and 4-D inputs, with and without weight/bias, each subset of inputs requiring
// grad, and a non-contiguous input.
#include <doctest/doctest.h>

#include "autograd/autograd.h"
#include "autograd/node.h"
#include "core/op_table.h"
#include "tests/autograd/grad_test_util.h"

using namespace kiln;

namespace {

using test::Inputs;
using test::leaf;

constexpr double kMomentum = 0.1, kEps = 1e-5;

Tensor bn(const Tensor& x, const Tensor& w, const Tensor& b) {
  return op::batch_norm(x, w, b, Tensor(), Tensor(), kMomentum, kEps);
}

/// A loss-like reduction with unequal weights, so grad_out is not constant per channel (a
/// constant grad_out has an all-zero x gradient, which would check nothing).
Tensor weighted(const Tensor& y) {
  return y * (arange(static_cast<double>(y.numel()), kFloat64).reshape(y.sizes()) * 0.1 + 0.5).sin();
}

}  // namespace

TEST_CASE("batch_norm gradients to x, weight and bias match finite differences") {
  manual_seed(11);
  for (const Shape& shape : {Shape{5, 3}, Shape{4, 3, 5}, Shape{3, 2, 3, 4}}) {
    CAPTURE(shape_str(shape));
    const int64_t c = shape[1];
    Tensor x = leaf(shape, -2.0, 2.0), w = leaf({c}, 0.5, 1.5), b = leaf({c});
    CHECK_GRAD([](Inputs v) { return weighted(bn(v[0], v[1], v[2])); }, x, w, b);
    CHECK_GRAD([](Inputs v) { return weighted(bn(v[0], Tensor(), Tensor())); }, x);
    CHECK_GRAD([](Inputs v) { return weighted(bn(v[0], v[1], Tensor())); }, x, w);
    CHECK_GRAD([](Inputs v) { return weighted(bn(v[0], Tensor(), v[1])); }, x, b);
  }
}

TEST_CASE("batch_norm gradients when only some inputs require grad") {
  manual_seed(12);
  Tensor x = (rand({4, 3, 2, 2}, kFloat64) * 4 - 2).contiguous();
  Tensor w = leaf({3}, 0.5, 1.5), b = leaf({3});
  // x is a constant: weight and bias gradients only (and only bias: the no-statistics path).
  CHECK_GRAD([&](Inputs v) { return weighted(bn(x, v[0], v[1])); }, w, b);
  CHECK_GRAD([&](Inputs v) { return weighted(bn(x, w.detach(), v[0])); }, b);
  CHECK_GRAD([&](Inputs v) { return weighted(bn(x, v[0], b.detach())); }, w);
  // weight and bias constants: the x gradient alone still scales by weight.
  CHECK_GRAD([&](Inputs v) { return weighted(bn(v[0], w.detach(), b.detach())); }, x.clone().set_requires_grad(true));
}

TEST_CASE("batch_norm gradients through a non-contiguous input") {
  manual_seed(13);
  Tensor x = leaf({3, 4, 5});
  // x.transpose(0, 1) is [4, 3, 5] with 3 channels, not contiguous.
  CHECK_GRAD([](Inputs v) { return weighted(bn(v[0].transpose(0, 1), v[1], v[2])); }, x, leaf({3}, 0.5, 1.5),
             leaf({3}));
}

TEST_CASE("batch_norm records one BatchNormBackward node") {
  Tensor x = leaf({4, 2});
  Tensor y = bn(x, Tensor(), Tensor());
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "BatchNormBackward");
}
