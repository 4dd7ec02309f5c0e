// F::cross_entropy over [N, C, d1, ...] logits (class dim moved last for the fused primitive)
// against the composite formula it replaced, with ignore_index, label smoothing and every reduction.
#include <doctest/doctest.h>

#include <cmath>

#include "nn/nn.h"
#include "tests/testing/compare.h"
#include "tests/testing/composite_ops.h"

using namespace kiln;
namespace F = kiln::nn::functional;

namespace {

using test::close;

}  // namespace

TEST_CASE("cross_entropy over [N, C, d1, d2] logits matches the composite in every reduction") {
  manual_seed(41);
  Tensor logits = randn({3, 5, 4, 2}, kFloat64) * 2.0;
  Tensor target = randint(0, 5, {3, 4, 2});
  target = where(rand({3, 4, 2}) < 0.25, full({3, 4, 2}, Scalar(int64_t{-100}), kInt64), target);
  for (double s : {0.0, 0.15}) {
    Tensor ref = test::composite_cross_entropy(logits, target, -100, s);
    CHECK(close(F::cross_entropy(logits, target, F::Reduction::none, s), ref, 1e-10));
    CHECK(close(F::cross_entropy(logits, target, F::Reduction::sum, s), ref.sum(), 1e-10));
    Tensor valid = (target != Scalar(int64_t{-100})).sum().to(kFloat64);
    CHECK(close(F::cross_entropy(logits, target, F::Reduction::mean, s), ref.sum() / valid, 1e-10));
  }
  CHECK_THROWS_WITH(F::cross_entropy(logits, randint(0, 5, {3, 4})),
                    doctest::Contains("cross_entropy: target shape [3, 4] does not match logits shape [3, 5, 4, 2]"));
}

