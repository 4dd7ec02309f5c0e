// Training-mode batch norm as one primitive (op::batch_norm, used by functional::batch_norm and
// BatchNorm1d/2d) against the composite formula it replaced: outputs, gradients and running
// statistics over several steps; mixed precision; and its errors.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "autograd/node.h"
#include "core/op_table.h"
#include "nn/nn.h"
#include "tests/testing/compare.h"

using namespace kiln;
namespace F = nn::functional;

namespace {

using test::close;

/// The composite formula functional::batch_norm used before the primitive (training mode),
/// running statistics updated with the unbiased variance.
Tensor composite_batch_norm(const Tensor& x, Tensor running_mean, Tensor running_var, const Tensor& weight,
                            const Tensor& bias, double momentum, double eps) {
  const int64_t c = x.size(1);
  Shape bshape(x.dim(), 1);
  bshape[1] = c;
  IntList dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  const int64_t n = x.numel() / c;
  Tensor mu = x.mean(dims, true);
  Tensor centered = x - mu;
  Tensor var = (centered * centered).mean(dims, true);
  Tensor y = centered * rsqrt(var + eps);
  if (running_mean.defined()) {
    NoGradGuard g;
    running_mean.mul_(1.0 - momentum).add_(mu.reshape({c}).to(running_mean.dtype()) * momentum);
    running_var.mul_(1.0 - momentum)
        .add_(var.reshape({c}).to(running_var.dtype()) * (momentum * n / static_cast<double>(n - 1)));
  }
  if (weight.defined()) y = y * weight.reshape(bshape);
  if (bias.defined()) y = y + bias.reshape(bshape);
  return y;
}

Tensor param(const Tensor& t) { return t.clone().set_requires_grad(true); }

}  // namespace

TEST_CASE("batch_norm matches the composite formula: outputs, gradients, running stats over steps") {
  manual_seed(21);
  for (DType t : {kFloat64, kFloat32}) {
    for (const Shape& shape : {Shape{16, 4}, Shape{6, 3, 7}, Shape{4, 5, 3, 6}}) {
      for (bool affine : {true, false}) {
        CAPTURE(dtype_name(t));
        CAPTURE(shape_str(shape));
        CAPTURE(affine);
        const double tol = t == kFloat64 ? 1e-10 : 1e-5;
        const int64_t c = shape[1];
        Tensor w0 = rand({c}, t) + 0.5, b0 = rand({c}, t) - 0.5;
        Tensor w1 = affine ? param(w0) : Tensor(), b1 = affine ? param(b0) : Tensor();
        Tensor w2 = affine ? param(w0) : Tensor(), b2 = affine ? param(b0) : Tensor();
        Tensor rm1 = zeros({c}, t), rv1 = ones({c}, t), rm2 = zeros({c}, t), rv2 = ones({c}, t);
        for (int step = 0; step < 4; ++step) {
          CAPTURE(step);
          Tensor x = (randn(shape, t) * (1.0 + step) + 0.3 * step).set_requires_grad(true);
          Tensor x2 = x.detach().clone().set_requires_grad(true);
          Tensor g = randn(shape, t);
          Tensor y1 = F::batch_norm(x, rm1, rv1, w1, b1, /*training=*/true, 0.1, 1e-5);
          Tensor y2 = composite_batch_norm(x2, rm2, rv2, w2, b2, 0.1, 1e-5);
          CHECK(close(y1, y2, tol));
          (y1 * g).sum().backward();
          (y2 * g).sum().backward();
          CHECK(close(x.grad(), x2.grad(), tol * 10));
          if (affine) {
            CHECK(close(w1.grad(), w2.grad(), tol * 10));
            CHECK(close(b1.grad(), b2.grad(), tol * 10));
          }
          CHECK(close(rm1, rm2, tol));
          CHECK(close(rv1, rv2, tol));
        }
      }
    }
  }
}

TEST_CASE("BatchNorm2d trains through the primitive and evaluates with its running statistics") {
  manual_seed(22);
  nn::BatchNorm2d m(3);
  Tensor rm = zeros({3}), rv = ones({3});
  for (int step = 0; step < 3; ++step) {
    Tensor x = randn({4, 3, 5, 5}) * 2.0 + 1.0;
    Tensor y = m(x);
    Tensor ref = composite_batch_norm(x, rm, rv, m.weight.detach(), m.bias.detach(), m.momentum, m.eps);
    CHECK(close(y, ref, 1e-5));
    REQUIRE(y.grad_fn() != nullptr);
    CHECK(y.grad_fn()->name() == "BatchNormBackward");
  }
  CHECK(close(m.running_mean, rm, 1e-5));
  CHECK(close(m.running_var, rv, 1e-5));
  CHECK(m.num_batches_tracked.item<int64_t>() == 3);
  m.eval();
  Tensor x = randn({2, 3, 4, 4});
  CHECK(close(m(x), (x - rm.reshape({1, 3, 1, 1})) / sqrt(rv.reshape({1, 3, 1, 1}) + m.eps), 1e-5));
}

TEST_CASE("batch_norm of a 16-bit input with f32 weight, bias and running statistics") {
  manual_seed(23);
  for (DType low : {kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(low));
    Tensor x = (randn({8, 3, 4, 4}) * 2.0 + 0.5).to(low).set_requires_grad(true);
    Tensor w = param(rand({3}) + 0.5), b = param(rand({3}) - 0.5);
    Tensor rm = zeros({3}), rv = ones({3}), rm_ref = zeros({3}), rv_ref = ones({3});
    Tensor y = op::batch_norm(x, w, b, rm, rv, 0.1, 1e-5);
    CHECK(y.dtype() == low);
    // Reference: the same values in f32 (the kernel computes in f32 and rounds once).
    Tensor xf = x.detach().to(kFloat32).set_requires_grad(true);
    Tensor wf = param(w.detach()), bf = param(b.detach());
    Tensor ref = composite_batch_norm(xf, rm_ref, rv_ref, wf, bf, 0.1, 1e-5);
    CHECK(close(y.to(kFloat32), ref, 1e-2));
    CHECK(close(rm, rm_ref, 1e-5));
    CHECK(close(rv, rv_ref, 1e-5));
    Tensor g = randn({8, 3, 4, 4});
    (y.to(kFloat32) * g).sum().backward();
    (ref * g).sum().backward();
    REQUIRE(x.grad().defined());
    CHECK(x.grad().dtype() == low);
    CHECK(w.grad().dtype() == kFloat32);
    CHECK(close(x.grad().to(kFloat32), xf.grad(), 2e-2));
    CHECK(close(w.grad(), wf.grad(), 1e-2));
    CHECK(close(b.grad(), bf.grad(), 1e-2));
  }
}

TEST_CASE("batch_norm without running statistics leaves nothing to update") {
  manual_seed(24);
  Tensor x = randn({5, 2, 3});
  Tensor y = op::batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 1e-5);
  CHECK(close(y, composite_batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), 0.1, 1e-5), 1e-5));
}

TEST_CASE("batch_norm errors name the op and what is wrong") {
  const Tensor w = ones({3}), none;
  auto bn = [](const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm, const Tensor& rv, double eps = 1e-5) {
    return op::batch_norm(x, w, b, rm, rv, 0.1, eps);
  };
  CHECK_THROWS_WITH(bn(randn({1, 3}), w, none, none, none),
                    doctest::Contains("batch_norm: expected more than 1 value per channel when training"));
  CHECK_THROWS_WITH(bn(randn({1, 3, 1, 1}), w, none, none, none),
                    doctest::Contains("more than 1 value per channel"));
  CHECK_THROWS_WITH(bn(randn({6}), none, none, none, none), doctest::Contains("at least 2-D"));
  CHECK_THROWS_WITH(bn(ones({4, 3}, kInt64), none, none, none, none), doctest::Contains("floating types only"));
  CHECK_THROWS_WITH(bn(randn({4, 3}), ones({4}), none, none, none),
                    doctest::Contains("expected weight of shape [3]"));
  CHECK_THROWS_WITH(bn(randn({4, 3}), none, ones({3, 1}), none, none), doctest::Contains("expected bias of shape [3]"));
  CHECK_THROWS_WITH(bn(randn({4, 3}), ones({3}, kFloat64), none, none, none),
                    doctest::Contains("weight dtype f64 does not go with input dtype f32"));
  CHECK_THROWS_WITH(bn(randn({4, 3}).to(kFloat16), ones({3}, kBFloat16), none, none, none),
                    doctest::Contains("expected f16 or f32"));
  CHECK_THROWS_WITH(bn(randn({4, 3}), none, none, zeros({3}), none),
                    doctest::Contains("running_mean and running_var must be both defined or both undefined"));
  CHECK_THROWS_WITH(bn(randn({4, 3}), none, none, zeros({2}), ones({2})),
                    doctest::Contains("expected running_mean of shape [3]"));
  CHECK_THROWS_WITH(bn(randn({4, 3}), none, none, none, none, -1.0), doctest::Contains("eps must be non-negative"));
  // Through the functional form too (its own 2-D check comes first).
  CHECK_THROWS_WITH(F::batch_norm(randn({1, 4}), zeros({4}), ones({4}), none, none, true),
                    doctest::Contains("expected more than 1 value per channel when training"));
}
