// Gradient clipping: the returned total norm (2, 1, 3 and infinity), PyTorch's scaling rule,
// skipped undefined gradients, the non-finite check, and clip_grad_value_.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "optim/clip.h"
#include "optim_test_util.h"

using namespace kiln;
using namespace kiln::optim;
using namespace kiln::optim_test;

namespace {

// Two parameters with gradients [3, -4] and [[12]] (L2 norm 13), and one without a gradient.
std::vector<Tensor> params(DType dt = kFloat64) {
  Tensor a = zeros({2}, dt).set_requires_grad(true);
  Tensor b = zeros({1, 1}, dt).set_requires_grad(true);
  Tensor c = zeros({3}, dt).set_requires_grad(true);
  a.set_grad(tensor({3.0, -4.0}, dt));
  b.set_grad(tensor({12.0}, dt).reshape({1, 1}));
  return {a, b, c};
}

}  // namespace

TEST_CASE("clip_grad_norm_ returns the total 2-norm and scales by max_norm / (total + 1e-6)") {
  for (DType dt : {kFloat64, kFloat32}) {
    CAPTURE(dt);
    auto ps = params(dt);
    double total = clip_grad_norm_(ps, 6.5);
    CHECK(total == doctest::Approx(13.0).epsilon(1e-12));
    const double coef = 6.5 / (13.0 + 1e-6);
    const double rtol = dt == kFloat64 ? 1e-14 : 1e-6;
    check_close(values(ps[0].grad()), {3 * coef, -4 * coef}, rtol);
    check_close(values(ps[1].grad()), {12 * coef}, rtol);
    CHECK_FALSE(ps[2].grad().defined());
    // Now within the bound: the norm is reported and nothing changes. (Clipping again to 6.5
    // would scale once more, by 6.5 / (6.5 + 1e-6), as PyTorch does.)
    double again = clip_grad_norm_(ps, 7.0);
    CHECK(again == doctest::Approx(6.5).epsilon(1e-6));
    check_close(values(ps[1].grad()), {12 * coef}, rtol);
  }
}

TEST_CASE("clip_grad_norm_ leaves gradients below max_norm untouched") {
  auto ps = params();
  CHECK(clip_grad_norm_(ps, 100.0) == doctest::Approx(13.0));
  CHECK(values(ps[0].grad()) == Vec{3, -4});
  CHECK(values(ps[1].grad()) == Vec{12});
}

TEST_CASE("clip_grad_norm_ supports 1-, 3- and infinity-norms") {
  const double inf = std::numeric_limits<double>::infinity();
  auto ps = params();
  CHECK(clip_grad_norm_(ps, 1e9, 1.0) == doctest::Approx(19.0));
  CHECK(clip_grad_norm_(ps, 1e9, 3.0) == doctest::Approx(std::cbrt(27.0 + 64 + 1728)));
  double total = clip_grad_norm_(ps, 6.0, inf);
  CHECK(total == 12.0);
  check_close(values(ps[1].grad()), {12 * 6.0 / (12 + 1e-6)}, 1e-14);
  CHECK_THROWS_WITH(clip_grad_norm_(ps, 1.0, 0.0), doctest::Contains("norm_type"));
}

TEST_CASE("clip_grad_norm_ on non-contiguous and f16 gradients takes the tensor-op path") {
  Tensor a = zeros({2, 3}, kFloat64).set_requires_grad(true);
  Tensor g = tensor<double>({1, 2, 3, 4, 5, 6}, {3, 2}).t();  // not contiguous
  REQUIRE_FALSE(g.is_contiguous());
  a.set_grad(g);
  Tensor h = zeros({2}, kFloat16).set_requires_grad(true);
  h.set_grad(tensor({2.0, -2.0}, kFloat16));
  double total = clip_grad_norm_({a, h}, 1.0);
  CHECK(total == doctest::Approx(std::sqrt(91.0 + 8.0)).epsilon(1e-6));
  const double coef = 1.0 / (total + 1e-6);
  check_close(values(a.grad()), {1 * coef, 3 * coef, 5 * coef, 2 * coef, 4 * coef, 6 * coef}, 1e-14);
  check_close(values(h.grad()), {2 * coef, -2 * coef}, 1e-3);
}

TEST_CASE("clip_grad_norm_ with error_if_nonfinite refuses NaN/inf gradients") {
  Tensor a = zeros({2}, kFloat64).set_requires_grad(true);
  a.set_grad(tensor({1.0, std::numeric_limits<double>::infinity()}, kFloat64));
  CHECK_THROWS_WITH(clip_grad_norm_({a}, 1.0, 2.0, true), doctest::Contains("non-finite"));
  CHECK(std::isinf(clip_grad_norm_({a}, 1.0)));
}

TEST_CASE("clip_grad_value_ clamps every element") {
  for (DType dt : {kFloat64, kFloat32}) {
    auto ps = params(dt);
    clip_grad_value_(ps, 3.5);
    CHECK(values(ps[0].grad()) == Vec{3, -3.5});
    CHECK(values(ps[1].grad()) == Vec{3.5});
  }
  Tensor a = zeros({2, 2}, kFloat64).set_requires_grad(true);
  a.set_grad(tensor<double>({-5, 1, 7, -0.5}, {2, 2}).t());
  clip_grad_value_({a}, 1.0);
  CHECK(values(a.grad()) == Vec{-1, 1, 1, -0.5});
}
