// The fused step kernels (kernels::sgd_step / adam_step, batched by SGD and Adam) against the
// tensor-op fallback the optimizers take for non-contiguous parameters: the same parameters,
// gradients and state after several steps, over many tensors of odd sizes, with parameters
// skipping steps (so Adam batches parameters at different step counts).
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/kernels.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "tests/optim/optim_test_util.h"

using namespace kiln;
using namespace kiln::optim;
using namespace kiln::optim_test;

namespace {

// Shapes [rows, cols]: a transposed view of the transpose of one is a non-contiguous tensor of
// the same shape (unless a dim is 1), which the optimizers cannot hand to the fused kernels.
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 1}, {1, 3}, {3, 5}, {7, 11}, {64, 33}, {2, 4099}};

struct Params {
  std::vector<Tensor> fused, fallback;
};

Params make_params(DType dtype) {
  Params out;
  for (auto [r, c] : kShapes) {
    Tensor v = randn({r, c}, kFloat64).to(dtype);
    out.fused.push_back(v.clone().set_requires_grad(true));
    Tensor nc = v.t().contiguous().t();
    if (r > 1 && c > 1) REQUIRE_FALSE(nc.is_contiguous());  // shapes with a 1 stay contiguous
    out.fallback.push_back(nc.set_requires_grad(true));
  }
  return out;
}

// Gives both copies of parameter i the same random gradient, except that odd parameters skip
// odd steps.
void set_grads(Params& ps, int step) {
  for (size_t i = 0; i < ps.fused.size(); ++i) {
    if (i % 2 == 1 && step % 2 == 1) {
      ps.fused[i].set_grad(Tensor());
      ps.fallback[i].set_grad(Tensor());
      continue;
    }
    Tensor g = randn(ps.fused[i].sizes(), kFloat64).to(ps.fused[i].dtype());
    ps.fused[i].set_grad(g);
    ps.fallback[i].set_grad(g.clone());
  }
}

void check_same(const Optimizer& fused, const Optimizer& fallback, const Params& ps, double tol) {
  for (size_t i = 0; i < ps.fused.size(); ++i) {
    CAPTURE(i);
    check_close(values(ps.fused[i]), values(ps.fallback[i]), tol, tol);
    const auto& a = fused.state(static_cast<int64_t>(i));
    const auto& b = fallback.state(static_cast<int64_t>(i));
    REQUIRE(a.size() == b.size());
    for (const auto& [key, t] : a) {
      CAPTURE(key);
      check_close(values(t), values(b.at(key)), tol, tol);
    }
  }
}

double tolerance(DType t) { return t == kFloat64 ? 1e-12 : 1e-5; }

}  // namespace

TEST_CASE("the fused step kernels are registered for the CPU") {
  CHECK(kernels::sgd_step.has(DeviceType::CPU));
  CHECK(kernels::adam_step.has(DeviceType::CPU));
}

TEST_CASE("SGD's fused kernel and its tensor-op fallback give the same parameters and buffers") {
  const std::vector<std::pair<std::string, SGDOptions>> configs = {
      {"plain", SGDOptions(0.1)},
      {"momentum", SGDOptions(0.1).set_momentum(0.9)},
      {"dampening", SGDOptions(0.05).set_momentum(0.8).set_dampening(0.3)},
      {"nesterov weight decay", SGDOptions(0.1).set_momentum(0.9).set_nesterov().set_weight_decay(0.01)},
      {"maximize", SGDOptions(0.1).set_momentum(0.5).set_maximize().set_weight_decay(0.1)},
  };
  for (DType dtype : {kFloat64, kFloat32}) {
    for (const auto& [name, o] : configs) {
      CAPTURE(name);
      const std::string dtype_str(dtype_name(dtype));
      CAPTURE(dtype_str);
      Params ps = make_params(dtype);
      SGD fused(ps.fused, o), fallback(ps.fallback, o);
      for (int step = 0; step < 4; ++step) {
        set_grads(ps, step);
        fused.step();
        fallback.step();
      }
      check_same(fused, fallback, ps, tolerance(dtype));
    }
  }
}

TEST_CASE("Adam's fused kernel and its tensor-op fallback give the same parameters and moments") {
  struct Config {
    std::string name;
    AdamOptions options;
    bool decoupled;
  };
  const std::vector<Config> configs = {
      {"adam", AdamOptions(0.01), false},
      {"adam weight decay", AdamOptions(0.01).set_weight_decay(0.1), false},
      {"adam amsgrad maximize", AdamOptions(0.01).set_amsgrad().set_maximize().set_betas(0.5, 0.6), false},
      {"adamw", AdamOptions(0.01).set_weight_decay(0.1), true},
      {"adamw amsgrad", AdamOptions(0.02).set_weight_decay(0.2).set_amsgrad(), true},
  };
  auto make = [](const Config& c, std::vector<Tensor> ps) -> std::unique_ptr<Optimizer> {
    if (c.decoupled) return std::make_unique<AdamW>(std::move(ps), c.options);
    return std::make_unique<Adam>(std::move(ps), c.options);
  };
  for (DType dtype : {kFloat64, kFloat32}) {
    for (const Config& c : configs) {
      CAPTURE(c.name);
      const std::string dtype_str(dtype_name(dtype));
      CAPTURE(dtype_str);
      Params ps = make_params(dtype);
      auto fused = make(c, ps.fused), fallback = make(c, ps.fallback);
      for (int step = 0; step < 5; ++step) {
        set_grads(ps, step);
        fused->step();
        fallback->step();
      }
      check_same(*fused, *fallback, ps, tolerance(dtype));
    }
  }
}

TEST_CASE("a mix of contiguous and non-contiguous parameters in one group steps each exactly once") {
  Params ps = make_params(kFloat64);
  std::vector<Tensor> mixed;
  for (size_t i = 0; i < ps.fused.size(); ++i) mixed.push_back(i % 3 == 0 ? ps.fallback[i] : ps.fused[i]);
  std::vector<Tensor> reference;
  for (const Tensor& p : mixed) reference.push_back(p.detach().clone().set_requires_grad(true));
  AdamW opt(mixed, AdamOptions(0.01));
  AdamW ref(reference, AdamOptions(0.01));
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < mixed.size(); ++i) {
      Tensor g = randn(mixed[i].sizes(), kFloat64);
      mixed[i].set_grad(g);
      reference[i].set_grad(g.clone());
    }
    opt.step();
    ref.step();
  }
  for (size_t i = 0; i < mixed.size(); ++i) {
    CAPTURE(i);
    check_close(values(mixed[i]), values(reference[i]), 1e-12, 1e-12);
    CHECK(opt.state(static_cast<int64_t>(i)).at("step").item<double>() == 3);
  }
}

TEST_CASE("f16 and bf16 parameters take the fused kernels, computing in f32") {
  for (DType dtype : {kFloat16, kBFloat16}) {
    const std::string dtype_str(dtype_name(dtype));
    CAPTURE(dtype_str);
    Tensor p = tensor<double>(kP0, {2, 3}).to(dtype).set_requires_grad(true);
    Tensor q = tensor<double>(kP0, {2, 3}).set_requires_grad(true);  // f64 reference
    SGD opt({p}, SGDOptions(0.1).set_momentum(0.9));
    SGD ref({q}, SGDOptions(0.1).set_momentum(0.9));
    for (int step = 0; step < 3; ++step) {
      Tensor g = tensor<double>(quadratic_grad(values(p)), {2, 3});
      p.set_grad(g.to(dtype));
      q.set_grad(g.to(dtype).to(kFloat64));
      opt.step();
      ref.step();
      check_close(values(p), values(q), 2e-2, 1e-2);
    }
    CHECK(opt.state(0).at("momentum_buffer").dtype() == dtype);
  }
}
