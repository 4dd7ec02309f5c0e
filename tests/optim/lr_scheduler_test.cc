// Learning-rate schedules: lr sequences against their closed forms, chaining warmup into cosine,
// per-group base lrs, and state save/load.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "optim/lr_scheduler.h"
#include "optim/sgd.h"
#include "optim_test_util.h"

using namespace kiln;
using namespace kiln::optim;
using namespace kiln::optim_test;

namespace {

Tensor param() { return tensor({1.0, 2.0}, kFloat64).set_requires_grad(true); }

double cosine(double base, double eta_min, int64_t e, int64_t t_max) {
  return eta_min + (base - eta_min) * (1 + std::cos(std::numbers::pi * e / t_max)) / 2;
}

// Checks the scheduler's and the optimizer's lr at epochs 0..n against `want(epoch)`.
template <class F>
void check_sequence(LRScheduler& s, Optimizer& opt, int n, F want) {
  for (int e = 0; e <= n; ++e) {
    CAPTURE(e);
    if (e > 0) s.step();
    CHECK(s.last_epoch() == e);
    CHECK(s.last_lr() == doctest::Approx(want(e)).epsilon(1e-12));
    CHECK(opt.lr() == s.last_lr());
  }
}

}  // namespace

TEST_CASE("StepLR multiplies by gamma every step_size epochs") {
  Tensor p = param();
  SGD opt({p}, SGDOptions(0.1));
  StepLR s(opt, 3, 0.5);
  check_sequence(s, opt, 10, [](int e) { return 0.1 * std::pow(0.5, e / 3); });
}

TEST_CASE("CosineAnnealingLR follows the half cosine from base to eta_min") {
  Tensor p = param();
  SGD opt({p}, SGDOptions(0.2));
  CosineAnnealingLR s(opt, 8, 0.01);
  check_sequence(s, opt, 8, [](int e) { return cosine(0.2, 0.01, e, 8); });
  CHECK(s.last_lr() == doctest::Approx(0.01));
}

TEST_CASE("LinearWarmup ramps linearly from start_factor * lr, then holds") {
  Tensor p = param();
  SGD opt({p}, SGDOptions(0.3));
  LinearWarmup s(opt, 4, 0.1);
  check_sequence(s, opt, 7, [](int e) { return 0.3 * (0.1 + 0.9 * std::min(e, 4) / 4.0); });
}

TEST_CASE("warmup then cosine: SequentialLR hands over at the milestone") {
  Tensor p = param();
  SGD opt({p}, SGDOptions(0.5));
  auto warmup = std::make_shared<LinearWarmup>(opt, 5, 0.2);
  auto cos = std::make_shared<CosineAnnealingLR>(opt, 10, 0.0);
  SequentialLR s(opt, {warmup, cos}, {5});
  CHECK(s.base_lrs() == std::vector<double>{0.5});  // not the lr the children left behind
  auto want = [](int e) { return e < 5 ? 0.5 * (0.2 + 0.8 * e / 5.0) : cosine(0.5, 0.0, e - 5, 10); };
  check_sequence(s, opt, 15, want);

  Tensor q = param();
  SGD opt2({q}, SGDOptions(0.5));
  auto helper = warmup_cosine(opt2, 5, 0.2, 10);
  check_sequence(*helper, opt2, 15, want);
}

TEST_CASE("schedules keep one base lr per parameter group") {
  Tensor a = param(), b = param();
  SGD opt({ParamGroup({a}), ParamGroup({b}, {{"lr", 1.0}})}, SGDOptions(0.1));
  StepLR s(opt, 1, 0.5);
  s.step();
  s.step();
  CHECK(s.last_lrs() == std::vector<double>{0.025, 0.25});
  CHECK(opt.param_groups()[1].get("lr") == 0.25);
  CHECK(opt.param_groups()[1].get("initial_lr") == 1.0);
}

TEST_CASE("scheduler state_dict round trip continues the sequence") {
  Tensor p = param();
  SGD opt({p}, SGDOptions(0.2));
  auto s = warmup_cosine(opt, 3, 0.1, 6, 0.001);
  for (int i = 0; i < 4; ++i) s->step();
  StateDict sd = s->state_dict();
  StateDict opt_sd = opt.state_dict();
  CHECK(sd.at("last_epoch").item<double>() == 4);

  Tensor q = param();
  SGD opt2({q}, SGDOptions(0.7));
  auto s2 = warmup_cosine(opt2, 3, 0.1, 6, 0.001);
  opt2.load_state_dict(opt_sd);
  s2->load_state_dict(sd);
  CHECK(s2->last_epoch() == 4);
  CHECK(opt2.lr() == opt.lr());
  for (int i = 0; i < 4; ++i) {
    s->step();
    s2->step();
    CHECK(s2->last_lr() == s->last_lr());
    CHECK(opt2.lr() == opt.lr());
  }

  StateDict bad = sd;
  bad.erase("base_lrs");
  CHECK_THROWS_WITH(s2->load_state_dict(bad), doctest::Contains("missing key 'base_lrs'"));
  bad = sd;
  bad["base_lrs"] = tensor({0.1, 0.2}, kFloat64);
  CHECK_THROWS_WITH(s2->load_state_dict(bad), doctest::Contains("one lr per parameter group"));
  CHECK(s2->last_epoch() == 8);
}

TEST_CASE("schedulers reject bad arguments") {
  Tensor p = param();
  SGD opt({p}, SGDOptions(0.1));
  CHECK_THROWS_WITH(StepLR(opt, 0), doctest::Contains("step_size"));
  CHECK_THROWS_WITH(CosineAnnealingLR(opt, 0), doctest::Contains("T_max"));
  CHECK_THROWS_WITH(LinearWarmup(opt, 3, 0.0), doctest::Contains("start_factor"));
  auto w = std::make_shared<LinearWarmup>(opt, 2, 0.5);
  CHECK_THROWS_WITH(SequentialLR(opt, {w, w}, {}), doctest::Contains("milestones"));
}
