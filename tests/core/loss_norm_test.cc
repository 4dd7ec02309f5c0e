// The fused cross_entropy and layer_norm primitives' CPU forward against the composite formulas
// they replace (log_softmax / mean / variance, in f64) on random inputs in f32 and bf16, with
// ignore_index, label smoothing, and errors that name the op and the offending value or shape.
#include <doctest/doctest.h>

#include "core/ops/cross_entropy.h"
#include "core/ops/layer_norm.h"
#include "core/op_table.h"
#include "tests/testing/compare.h"

using namespace kiln;

namespace {

double tol(DType t) { return t == kFloat32 ? 1e-5 : 1e-2; }

/// The composite cross-entropy in f64: lse - (1 - s) x[t] - s mean(x), 0 where ignored.
Tensor reference_cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double s) {
  Tensor x = logits.to(kFloat64);
  Tensor logp = x.log_softmax(1);
  Tensor valid = target != Scalar(ignore_index);
  Tensor safe = where(valid, target, Scalar(int64_t{0}));
  Tensor nll = -logp.gather(1, safe.unsqueeze(1)).squeeze(1);
  Tensor loss = nll * (1.0 - s) + (-logp.mean({1})) * s;
  return where(valid, loss, 0.0);
}

Tensor reference_layer_norm(const Tensor& x0, const Tensor& w, const Tensor& b, int64_t k, double eps) {
  Tensor x = x0.to(kFloat64);
  IntList dims;
  for (int64_t i = x.dim() - k; i < x.dim(); ++i) dims.push_back(i);
  Tensor c = x - x.mean(dims, true);
  Tensor y = c * rsqrt((c * c).mean(dims, true) + eps);
  if (w.defined()) y = y * w.to(kFloat64);
  if (b.defined()) y = y + b.to(kFloat64);
  return y;
}

Tensor random(const Shape& shape, DType dtype, double scale = 3.0) { return ((rand(shape) - 0.5) * scale).to(dtype); }

}  // namespace

TEST_CASE("cross_entropy matches log_softmax + gather, with ignore_index and label smoothing") {
  manual_seed(11);
  for (DType dt : {kFloat32, kBFloat16}) {
    for (int64_t C : {1, 3, 17, 1000}) {
      for (double s : {0.0, 0.1}) {
        const int64_t N = 37;
        Tensor logits = random({N, C}, dt, 8.0);
        Tensor target = randint(0, C, {N});
        target = where(rand({N}) < 0.2, full({N}, Scalar(int64_t{-100}), kInt64), target);
        Tensor loss = op::cross_entropy(logits, target, -100, s);
        CHECK(loss.sizes() == Shape{N});
        CHECK(loss.dtype() == dt);
        CHECK_ALLCLOSE(loss.to(kFloat64), reference_cross_entropy(logits, target, -100, s), tol(dt), tol(dt));
        auto [l2, lse] = cross_entropy_with_lse(logits, target, -100, s);
        CHECK_ALLCLOSE(lse.to(kFloat64), logits.to(kFloat64).exp().sum({1}).log(), tol(dt), tol(dt));
      }
    }
  }
}

TEST_CASE("cross_entropy is stable for large logits and takes strided logits") {
  Tensor logits = tensor({1000.0, 0.0, -1000.0, 5.0, 1005.0, 1000.0}, kFloat32).reshape({2, 3});
  Tensor target = tensor<int64_t>({0, 1});
  Tensor loss = op::cross_entropy(logits, target, -100, 0.0);
  CHECK_ALLCLOSE(loss.to(kFloat64), reference_cross_entropy(logits, target, -100, 0.0), 1e-5, 1e-4);
  Tensor wide = random({5, 8}, kFloat32);
  Tensor t5 = randint(0, 5, {8});
  CHECK_ALLCLOSE(op::cross_entropy(wide.t(), t5, -100, 0.2).to(kFloat64),
                 reference_cross_entropy(wide.t(), t5, -100, 0.2));
}

TEST_CASE("cross_entropy errors name the op and the offending value or shape") {
  Tensor logits = random({4, 3}, kFloat32);
  CHECK_THROWS_WITH(op::cross_entropy(logits, tensor<int64_t>({0, 1, 3, 2}), -100, 0.0),
                    doctest::Contains("cross_entropy: target 3 (row 2) is out of range for 3 classes"));
  CHECK_THROWS_WITH(op::cross_entropy(logits, tensor<int64_t>({0, -1, 1, 2}), -100, 0.0),
                    doctest::Contains("target -1"));
  CHECK_THROWS_WITH(op::cross_entropy(logits, tensor<int64_t>({0, 1, 2}), -100, 0.0),
                    doctest::Contains("cross_entropy: target shape [3] does not match logits shape [4, 3]"));
  CHECK_THROWS_WITH(op::cross_entropy(random({4, 3, 2}, kFloat32), tensor<int64_t>({0, 1, 2, 0}), -100, 0.0),
                    doctest::Contains("cross_entropy: expected logits [N, C]"));
  CHECK_THROWS_WITH(op::cross_entropy(logits, tensor<int64_t>({0, 1, 2, 0}).to(kInt32), -100, 0.0),
                    doctest::Contains("target must be i64"));
  CHECK_THROWS_WITH(op::cross_entropy(logits, tensor<int64_t>({0, 1, 2, 0}), -100, 1.5),
                    doctest::Contains("label_smoothing"));
  CHECK_NOTHROW(op::cross_entropy(logits, tensor<int64_t>({0, 7, 2, 7}), 7, 0.0));
}

TEST_CASE("layer_norm matches mean / variance normalization, with and without weight and bias") {
  manual_seed(12);
  for (DType dt : {kFloat32, kBFloat16}) {
    for (int64_t k : {1, 2}) {
      const Shape shape{6, 5, 33};
      const Shape wshape(shape.end() - k, shape.end());
      Tensor x = (random(shape, kFloat64, 4.0) + 1.5).to(dt);
      Tensor w = random(wshape, dt), b = random(wshape, dt);
      for (int affine = 0; affine < 3; ++affine) {
        Tensor wa = affine >= 1 ? w : Tensor(), ba = affine >= 2 ? b : Tensor();
        Tensor y = op::layer_norm(x, wa, ba, k, 1e-5);
        CHECK(y.sizes() == shape);
        CHECK(y.dtype() == dt);
        CHECK_ALLCLOSE(y.to(kFloat64), reference_layer_norm(x, wa, ba, k, 1e-5), tol(dt), tol(dt));
      }
      auto [y, mean, rstd] = layer_norm_with_stats(x, w, b, k, 1e-5);
      CHECK(mean.dtype() == (dt == kBFloat16 ? kFloat32 : dt));
      CHECK(mean.numel() == x.numel() / w.numel());
    }
  }
  Tensor xt = random({7, 9}, kFloat32).t();  // strided input
  CHECK_ALLCLOSE(op::layer_norm(xt, Tensor(), Tensor(), 1, 1e-5).to(kFloat64),
                 reference_layer_norm(xt, Tensor(), Tensor(), 1, 1e-5));
}

TEST_CASE("layer_norm errors name the op and the offending shape") {
  Tensor x = random({4, 6}, kFloat32);
  CHECK_THROWS_WITH(op::layer_norm(x, random({5}, kFloat32), Tensor(), 1, 1e-5),
                    doctest::Contains("layer_norm: weight shape [5] differs from the normalized shape [6]"));
  CHECK_THROWS_WITH(op::layer_norm(x, Tensor(), random({6}, kFloat64), 1, 1e-5),
                    doctest::Contains("layer_norm: bias dtype f64 differs"));
  CHECK_THROWS_WITH(op::layer_norm(x, Tensor(), Tensor(), 3, 1e-5),
                    doctest::Contains("layer_norm: normalized_dims=3 does not fit input shape [4, 6]"));
  CHECK_THROWS_WITH(op::layer_norm(x.to(kInt64), Tensor(), Tensor(), 1, 1e-5),
                    doctest::Contains("layer_norm: dtype i64 is not supported"));
}
