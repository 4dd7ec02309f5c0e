// Losses against hand-computed references, their stability on extreme logits, and gradcheck.
#include <doctest/doctest.h>

#include <cmath>

#include "nn/nn.h"

using namespace kiln;
namespace F = kiln::nn::functional;
using autograd::gradcheck;

namespace {
void check_grad(const std::function<Tensor(const std::vector<Tensor>&)>& f, Tensor x) {
  auto r = gradcheck(f, {x});
  CHECK_MESSAGE(r.ok, r.message);
}
}  // namespace

TEST_CASE("cross_entropy equals -log softmax at the target, averaged") {
  Tensor logits = tensor(std::vector<double>{1, 2, 3, 1, 0, -1}, {2, 3});
  Tensor target = tensor(std::vector<int64_t>{2, 0});
  double l0 = -(3 - std::log(std::exp(1) + std::exp(2) + std::exp(3)));
  double l1 = -(1 - std::log(std::exp(1) + std::exp(0) + std::exp(-1)));
  CHECK(F::cross_entropy(logits, target).item<double>() == doctest::Approx((l0 + l1) / 2));
  CHECK(F::cross_entropy(logits, target, F::Reduction::sum).item<double>() == doctest::Approx(l0 + l1));
  auto none = F::cross_entropy(logits, target, F::Reduction::none).to_vector<double>();
  CHECK(none[1] == doctest::Approx(l1));
}

TEST_CASE("cross_entropy with ignore_index and label smoothing") {
  Tensor logits = tensor(std::vector<double>{1, 2, 3, 1, 0, -1}, {2, 3});
  Tensor target = tensor(std::vector<int64_t>{2, -100});
  double l0 = -(3 - std::log(std::exp(1) + std::exp(2) + std::exp(3)));
  CHECK(F::cross_entropy(logits, target).item<double>() == doctest::Approx(l0));
  Tensor t2 = tensor(std::vector<int64_t>{2, 0});
  Tensor logp = logits.log_softmax(1);
  auto lp = logp.to_vector<double>();
  double s0 = -(lp[0] + lp[1] + lp[2]) / 3, s1 = -(lp[3] + lp[4] + lp[5]) / 3;
  double expected = (0.9 * -lp[2] + 0.1 * s0 + 0.9 * -lp[3] + 0.1 * s1) / 2;
  CHECK(F::cross_entropy(logits, t2, F::Reduction::mean, 0.1).item<double>() == doctest::Approx(expected));
}

TEST_CASE("cross_entropy stays finite for huge logits") {
  Tensor logits = tensor(std::vector<float>{1e4f, -1e4f, 0.0f, 3e4f}, {2, 2});
  Tensor target = tensor(std::vector<int64_t>{1, 0});
  double l = F::cross_entropy(logits, target).item<double>();
  CHECK(std::isfinite(l));
  CHECK(l == doctest::Approx((2e4 + 3e4) / 2).epsilon(1e-4));
}

TEST_CASE("regression losses and logits BCE") {
  Tensor a = tensor({1.0, 2.0, -1.0}, kFloat64), b = tensor({0.5, 2.0, 1.0}, kFloat64);
  CHECK(F::mse_loss(a, b).item<double>() == doctest::Approx((0.25 + 0 + 4) / 3));
  CHECK(F::l1_loss(a, b, F::Reduction::sum).item<double>() == doctest::Approx(2.5));
  Tensor x = tensor({-800.0, 0.5, 800.0}, kFloat64), y = tensor({0.0, 1.0, 1.0}, kFloat64);
  auto l = F::binary_cross_entropy_with_logits(x, y, F::Reduction::none).to_vector<double>();
  CHECK(l[0] == doctest::Approx(0.0));
  CHECK(l[1] == doctest::Approx(std::log1p(std::exp(-0.5))));
  CHECK(l[2] == doctest::Approx(0.0));
  CHECK_THROWS_WITH(F::mse_loss(a, zeros({2}, kFloat64)), doctest::Contains("mse_loss"));
}

TEST_CASE("loss gradients") {
  manual_seed(9);
  Tensor target = tensor(std::vector<int64_t>{2, 0, 1, -100});
  Tensor x = randn({4, 3}, kFloat64).set_requires_grad(true);
  check_grad([&](const std::vector<Tensor>& v) { return F::cross_entropy(v[0], target); }, x);
  check_grad([&](const std::vector<Tensor>& v) { return F::cross_entropy(v[0], target, F::Reduction::sum, 0.2); }, x);
  Tensor y = rand({4, 3}, kFloat64);
  check_grad([&](const std::vector<Tensor>& v) { return F::mse_loss(v[0], y); }, x);
  check_grad([&](const std::vector<Tensor>& v) { return F::l1_loss(v[0], y); }, x);
  check_grad([&](const std::vector<Tensor>& v) { return F::binary_cross_entropy_with_logits(v[0], y); }, x);
  Tensor pw = tensor({2.0, 1.0, 0.5}, kFloat64);
  check_grad([&](const std::vector<Tensor>& v) {
    return F::binary_cross_entropy_with_logits(v[0], y, F::Reduction::mean, pw);
  }, x);
}
