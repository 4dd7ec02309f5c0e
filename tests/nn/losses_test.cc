// Losses against hand-computed references and their stability on extreme logits (their gradients:
// the op database's rows, tests/testing/op_db_nn.cc).
#include <doctest/doctest.h>

#include <cmath>

#include "nn/nn.h"

using namespace kiln;
namespace F = kiln::nn::functional;

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

namespace {
/// -log softmax(row)[c]
double nll_of(const std::vector<double>& row, size_t c) {
  double z = 0;
  for (double x : row) z += std::exp(x);
  return -(row[c] - std::log(z));
}
}  // namespace

TEST_CASE("cross_entropy with class weights: weighted mean over the targets' weights, ignore_index, smoothing") {
  Tensor logits = tensor(std::vector<double>{1, 2, 3, 1, 0, -1, 0.5, 0.5, 2}, {3, 3});
  Tensor w = tensor({0.2, 1.0, 3.0}, kFloat64);
  Tensor target = tensor(std::vector<int64_t>{2, 0, -100});
  const std::vector<double> r0{1, 2, 3}, r1{1, 0, -1};
  const double l0 = 3.0 * nll_of(r0, 2), l1 = 0.2 * nll_of(r1, 0);
  CHECK(F::cross_entropy(logits, target, {.weight = w}).item<double>() == doctest::Approx((l0 + l1) / 3.2));
  auto none = F::cross_entropy(logits, target, {.weight = w, .reduction = F::Reduction::none}).to_vector<double>();
  CHECK(none[0] == doctest::Approx(l0));
  CHECK(none[2] == 0.0);
  // PyTorch's weighted smoothing: (1 - e) * nll + e / C * sum_c w_c * -logp_c, both over sum w_t.
  const double e = 0.3;
  auto smooth = [&](const std::vector<double>& r) {
    double s = 0;
    for (size_t c = 0; c < 3; ++c) s += w.to_vector<double>()[c] * nll_of(r, c);
    return s;
  };
  const double want = ((1 - e) * (l0 + l1) + e / 3 * (smooth(r0) + smooth(r1))) / 3.2;
  CHECK(F::cross_entropy(logits, target, {.weight = w, .label_smoothing = e}).item<double>() == doctest::Approx(want));
}

TEST_CASE("cross_entropy with probability targets equals the class-index loss for one-hot targets") {
  Tensor logits = randn({4, 5}, kFloat64);
  Tensor target = tensor(std::vector<int64_t>{1, 0, 4, 2});
  Tensor probs = one_hot(target, 5).to(kFloat64);
  CHECK(F::cross_entropy(logits, probs, F::CrossEntropyOptions{}).item<double>() ==
        doctest::Approx(F::cross_entropy(logits, target).item<double>()));
  CHECK(F::cross_entropy(logits, probs, {.label_smoothing = 0.2}).item<double>() ==
        doctest::Approx(F::cross_entropy(logits, target, F::Reduction::mean, 0.2).item<double>()));
  CHECK_THROWS_WITH(F::cross_entropy(logits, probs.narrow(1, 0, 4), F::CrossEntropyOptions{}),
                    doctest::Contains("probability targets must have the logits' shape"));
  CHECK_THROWS_WITH(F::cross_entropy(logits, target, {.weight = ones({4}, kFloat64)}),
                    doctest::Contains("one value per class ([5])"));
}

TEST_CASE("binary_cross_entropy, kl_div, smooth_l1_loss and huber_loss against their formulas") {
  Tensor p = tensor({0.2, 0.9, 1.0}, kFloat64), y = tensor({0.0, 1.0, 0.0}, kFloat64);
  auto bce = F::binary_cross_entropy(p, y, F::Reduction::none).to_vector<double>();
  CHECK(bce[0] == doctest::Approx(-std::log(0.8)));
  CHECK(bce[1] == doctest::Approx(-std::log(0.9)));
  CHECK(bce[2] == 100.0);  // log(0) clamped at -100, as PyTorch
  Tensor logq = log_softmax(tensor(std::vector<double>{1, 2, 0, 0}, {2, 2}), 1);
  Tensor t = tensor(std::vector<double>{0.25, 0.75, 0.0, 1.0}, {2, 2});
  auto lq = logq.to_vector<double>();
  const double kl = 0.25 * (std::log(0.25) - lq[0]) + 0.75 * (std::log(0.75) - lq[1]) + 1.0 * (0 - lq[3]);
  CHECK(F::kl_div(logq, t, F::Reduction::sum).item<double>() == doctest::Approx(kl));
  CHECK(F::kl_div(logq, t, F::Reduction::batchmean).item<double>() == doctest::Approx(kl / 2));
  CHECK(F::kl_div(logq, t).item<double>() == doctest::Approx(kl / 4));
  CHECK(F::kl_div(logq, log(t + 1e-300), F::Reduction::sum, true).item<double>() == doctest::Approx(kl));
  Tensor a = tensor({0.0, 0.0, 0.0}, kFloat64), b = tensor({0.3, -2.0, 1.0}, kFloat64);
  auto sl1 = F::smooth_l1_loss(a, b, F::Reduction::none, 0.5).to_vector<double>();
  CHECK(sl1 == std::vector<double>{0.5 * 0.09 / 0.5, 2.0 - 0.25, 1.0 - 0.25});
  auto hub = F::huber_loss(a, b, F::Reduction::none, 1.5).to_vector<double>();
  CHECK(hub == std::vector<double>{0.5 * 0.09, 1.5 * (2.0 - 0.75), 0.5});
  CHECK(F::smooth_l1_loss(a, b, F::Reduction::sum, 0.0).item<double>() == doctest::Approx(3.3));
}
