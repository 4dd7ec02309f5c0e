// Adam and AdamW against PyTorch's update rules written out in plain f64 arithmetic: three steps
// with bias correction, coupled and decoupled weight decay, AMSGrad and maximize; f32 (fused)
// and fallback paths.
#include <doctest/doctest.h>

#include <cmath>

#include "optim/adam.h"
#include "optim_test_util.h"

using namespace kiln;
using namespace kiln::optim;
using namespace kiln::optim_test;

namespace {

// torch.optim.Adam / AdamW's single-tensor step, element by element.
struct AdamReference {
  double lr, beta1, beta2, eps, weight_decay;
  bool decoupled, amsgrad, maximize;
  Vec m, v, vmax;
  int t = 0;

  void step(Vec& p, const Vec& grad) {
    if (m.empty()) m.assign(p.size(), 0), v.assign(p.size(), 0), vmax.assign(p.size(), 0);
    ++t;
    const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = maximize ? -grad[i] : grad[i];
      if (decoupled) p[i] *= 1 - lr * weight_decay;
      else g += weight_decay * p[i];
      m[i] = beta1 * m[i] + (1 - beta1) * g;
      v[i] = beta2 * v[i] + (1 - beta2) * g * g;
      vmax[i] = std::max(vmax[i], v[i]);
      const double v_hat = amsgrad ? vmax[i] : v[i];
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v_hat) / std::sqrt(bc2) + eps);
    }
  }
};

struct Config {
  const char* name;
  AdamOptions options;
  bool adamw;
};

std::vector<Config> configs() {
  return {
      {"adam", AdamOptions(0.1), false},
      {"adam betas eps", AdamOptions(0.05).set_betas(0.8, 0.95).set_eps(1e-3), false},
      {"adam weight decay", AdamOptions(0.1).set_weight_decay(0.1), false},
      {"adam amsgrad", AdamOptions(0.1).set_amsgrad().set_betas(0.5, 0.6), false},
      {"adam maximize", AdamOptions(0.1).set_maximize().set_weight_decay(0.05), false},
      {"adamw default decay", AdamOptions(0.1), true},
      {"adamw decay amsgrad", AdamOptions(0.1).set_weight_decay(0.2).set_amsgrad().set_betas(0.5, 0.6), true},
  };
}

AdamReference reference_for(const Config& c) {
  const AdamOptions& o = c.options;
  return AdamReference{o.lr,      o.beta1,  o.beta2,    o.eps, o.weight_decay.value_or(c.adamw ? 1e-2 : 0.0),
                       c.adamw,   o.amsgrad, o.maximize, {},    {},
                       {}};
}

std::unique_ptr<Optimizer> make(const Config& c, Tensor p) {
  if (c.adamw) return std::make_unique<AdamW>(std::vector<Tensor>{p}, c.options);
  return std::make_unique<Adam>(std::vector<Tensor>{p}, c.options);
}

void run_against_reference(const Config& c, Tensor p, double rtol) {
  auto opt = make(c, p);
  AdamReference ref = reference_for(c);
  Vec expect = kP0;
  for (int step = 0; step < 3; ++step) {
    backward_quadratic(p);
    ref.step(expect, quadratic_grad(expect));
    opt->step();
    check_close(values(p), expect, rtol, rtol);
  }
  CHECK(opt->state(0).at("step").item<double>() == 3.0);
}

}  // namespace

TEST_CASE("Adam and AdamW match PyTorch's update rules for three steps (f64, fused path)") {
  for (const Config& c : configs()) {
    CAPTURE(c.name);
    run_against_reference(c, tensor<double>(kP0, {2, 3}).set_requires_grad(true), 1e-12);
  }
}

TEST_CASE("Adam on f32 parameters agrees with the f64 reference to f32 precision") {
  for (const Config& c : configs()) {
    CAPTURE(c.name);
    run_against_reference(c, tensor<double>(kP0, {2, 3}, kFloat32).set_requires_grad(true), 1e-5);
  }
}

TEST_CASE("Adam's tensor-op fallback (non-contiguous parameters) and f16 parameters follow the same rule") {
  for (const Config& c : configs()) {
    CAPTURE(c.name);
    Tensor p = tensor<double>(kP0, {2, 3}).t().contiguous().t();
    REQUIRE_FALSE(p.is_contiguous());
    p.set_requires_grad(true);
    auto opt = make(c, p);
    AdamReference ref = reference_for(c);
    Vec expect = kP0;
    for (int step = 0; step < 3; ++step) {
      p.set_grad(tensor<double>(quadratic_grad(expect), {2, 3}));
      ref.step(expect, quadratic_grad(expect));
      opt->step();
      check_close(values(p), expect, 1e-12, 1e-12);
    }
  }
  Config c{"adamw f16", AdamOptions(0.01), true};
  run_against_reference(c, tensor<double>(kP0, {2, 3}, kFloat16).set_requires_grad(true), 1e-2);
}

TEST_CASE("AdamW defaults to weight decay 1e-2, Adam to none") {
  Tensor p = tensor({1.0}, kFloat64).set_requires_grad(true);
  CHECK(AdamW({p}).param_groups()[0].get("weight_decay") == 1e-2);
  CHECK(AdamW({p}, AdamOptions(0.1).set_weight_decay(0)).param_groups()[0].get("weight_decay") == 0);
  CHECK(Adam({p}).param_groups()[0].get("weight_decay") == 0);
  CHECK(Adam({p}).name() == "Adam");
  CHECK(AdamW({p}).name() == "AdamW");
}

TEST_CASE("Adam's first step moves every coordinate by about lr, whatever the gradient's scale") {
  // With bias correction, step 1 is lr * g / (|g| + eps'): the sign of g times lr.
  Tensor p = tensor({1.0, 1.0, 1.0}, kFloat64).set_requires_grad(true);
  Adam opt({p}, AdamOptions(0.01));
  p.set_grad(tensor({1e-4, -3.0, 1e3}, kFloat64));
  opt.step();
  check_close(values(p), {0.99, 1.01, 0.99}, 1e-5);
}

TEST_CASE("Adam rejects invalid options, naming them") {
  Tensor p = tensor({1.0}, kFloat64).set_requires_grad(true);
  CHECK_THROWS_WITH(Adam({p}, AdamOptions(0.1).set_betas(1.0, 0.9)), doctest::Contains("invalid beta1 1"));
  CHECK_THROWS_WITH(AdamW({p}, AdamOptions(0.1).set_betas(0.9, -0.5)), doctest::Contains("AdamW: invalid beta2"));
  CHECK_THROWS_WITH(Adam({p}, AdamOptions(0.1).set_eps(-1)), doctest::Contains("invalid eps"));
}
