// The fused cross_entropy, layer_norm and batch_norm primitives beyond their op database rows
// (tests/testing/op_db_nn.cc holds their f64 gradchecks: ignore_index, smoothing, with and
// without weight/bias, subsets of inputs, strided inputs): the f32 and bf16 backward against
// autograd through the composite formulas they replace, and batch norm's one backward node.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/autograd.h"
#include "autograd/node.h"
#include "core/op_table.h"
#include "tests/testing/compare.h"
#include "tests/testing/composite_ops.h"

using namespace kiln;

namespace {

using test::close;

Tensor targets_with_ignored(int64_t N, int64_t C, int64_t ignore_index) {
  Tensor t = randint(0, C, {N});
  return where(rand({N}) < 0.3, full({N}, Scalar(ignore_index), kInt64), t);
}

Tensor composite_layer_norm(const Tensor& x, const Tensor& w, const Tensor& b, double eps) {
  Tensor c = x - x.mean({-1}, true);
  Tensor y = c * rsqrt((c * c).mean({-1}, true) + eps);
  if (w.defined()) y = y * w;
  if (b.defined()) y = y + b;
  return y;
}

Tensor grad_of(const Tensor& leaf_t) { return leaf_t.grad().to(kFloat64); }

}  // namespace

TEST_CASE("cross_entropy and layer_norm backward match the composite formulas in f32 and bf16") {
  manual_seed(23);
  for (DType dt : {kFloat32, kBFloat16}) {
    const double tol = dt == kFloat32 ? 1e-5 : 2e-2;
    const int64_t N = 29, C = 300;
    Tensor base = (rand({N, C}) - 0.5) * 6.0;
    Tensor t = targets_with_ignored(N, C, -100);
    Tensor gout = rand({N}) + 0.5;
    Tensor x1 = base.to(dt).detach().set_requires_grad(true);
    (op::cross_entropy(x1, t, -100, 0.1) * gout.to(dt)).sum().backward();
    Tensor x2 = base.to(dt).to(kFloat64).detach().set_requires_grad(true);
    (test::composite_cross_entropy(x2, t, -100, 0.1) * gout.to(kFloat64)).sum().backward();
    CHECK(close(grad_of(x1), grad_of(x2), tol));

    Tensor xb = (rand({N, 64}) - 0.2) * 4.0, wb = rand({64}) + 0.5, bb = rand({64}) - 0.5;
    Tensor gy = rand({N, 64}) - 0.5;
    Tensor a = xb.to(dt).detach().set_requires_grad(true), aw = wb.to(dt).detach().set_requires_grad(true),
           ab = bb.to(dt).detach().set_requires_grad(true);
    (op::layer_norm(a, aw, ab, 1, 1e-5) * gy.to(dt)).sum().backward();
    Tensor r = xb.to(dt).to(kFloat64).detach().set_requires_grad(true), rw = wb.to(dt).to(kFloat64).detach().set_requires_grad(true),
           rb = bb.to(dt).to(kFloat64).detach().set_requires_grad(true);
    (composite_layer_norm(r, rw, rb, 1e-5) * gy.to(dt).to(kFloat64)).sum().backward();
    CHECK(close(grad_of(a), grad_of(r), tol));
    CHECK(close(grad_of(aw), grad_of(rw), tol));
    CHECK(close(grad_of(ab), grad_of(rb), tol));
  }
}

TEST_CASE("batch_norm records one BatchNormBackward node") {
  Tensor x = test::leaf({4, 2});
  Tensor y = op::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 1e-5);
  REQUIRE(y.grad_fn() != nullptr);
  CHECK(y.grad_fn()->name() == "BatchNormBackward");
}
