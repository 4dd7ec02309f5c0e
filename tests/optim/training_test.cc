// End to end: a seeded linear regression trained with each optimizer (and a schedule and
// clipping) drives its loss down by more than 10x, and the same seed gives the same losses.
#include <doctest/doctest.h>

#include "optim/optim.h"
#include "optim_test_util.h"

using namespace kiln;
using namespace kiln::optim;

namespace {

struct Regression {
  Tensor x, y, w, b;

  explicit Regression(uint64_t seed) {
    Generator gen(seed);
    x = randn({128, 4}, kFloat32, &gen);
    Tensor true_w = tensor({2.0, -3.0, 0.5, 1.5}, kFloat32).reshape({4, 1});
    y = matmul(x, true_w) + 0.7 + randn({128, 1}, kFloat32, &gen) * 0.01;
    w = (randn({4, 1}, kFloat32, &gen) * 0.1).set_requires_grad(true);
    b = zeros({1}, kFloat32).set_requires_grad(true);
  }
  Tensor loss() const { return (matmul(x, w) + b - y).square().mean(); }
};

// Trains for `steps` full-batch steps; returns the losses before and after.
std::vector<double> train(Regression& r, Optimizer& opt, int steps, LRScheduler* sched = nullptr,
                          double clip = 0) {
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    Tensor loss = r.loss();
    losses.push_back(loss.item<double>());
    loss.backward();
    if (clip > 0) clip_grad_norm_({r.w, r.b}, clip);
    opt.step();
    if (sched) sched->step();
  }
  losses.push_back(r.loss().item<double>());
  return losses;
}

}  // namespace

TEST_CASE("SGD with momentum fits a linear regression (loss falls more than 10x)") {
  Regression r(1234);
  SGD opt({r.w, r.b}, SGDOptions(0.05).set_momentum(0.9));
  auto losses = train(r, opt, 100);
  CHECK(losses.back() < losses.front() / 10);
}

TEST_CASE("Adam with warmup + cosine and clipping fits a linear regression") {
  Regression r(1234);
  Adam opt({r.w, r.b}, AdamOptions(0.1));
  auto sched = warmup_cosine(opt, 10, 0.1, 190);
  auto losses = train(r, opt, 200, sched.get(), 5.0);
  CHECK(losses.back() < losses.front() / 10);
}

TEST_CASE("AdamW training is deterministic for a fixed seed") {
  auto run = [] {
    Regression r(99);
    AdamW opt({r.w, r.b}, AdamOptions(0.05));
    return train(r, opt, 150);
  };
  auto a = run(), b = run();
  CHECK(a == b);
  CHECK(a.back() < a.front() / 10);
}
