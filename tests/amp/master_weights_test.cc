// Master weights ("O2"): an optimizer with set_master_weights() steps f16/bf16 parameters through
// f32 copies, so updates a 16-bit weight would round away still add up; its state is f32; the
// copies travel through state_dict and checkpoints; and an f16 model trains under autocast with
// a GradScaler.
#include <doctest/doctest.h>

#include <cmath>

#include "amp/amp.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/file_util.h"
#include "tests/testing/compare.h"
#include "train/checkpoint.h"

using namespace kiln;
using test::contains;
using test::error_of;

namespace {

struct Trained {
  Tensor w;
  std::unique_ptr<optim::SGD> opt;
};

/// `steps` SGD steps of lr 1e-4 on a weight of 1.0 with gradient 1: each update (1e-4) is below
/// half the spacing of f16 (9.8e-4) and bf16 (7.8e-3) at 1.0.
Trained train_small_updates(DType dt, bool master, int steps) {
  Trained t{ones({4}, dt).set_requires_grad(true), nullptr};
  t.opt = std::make_unique<optim::SGD>(std::vector<Tensor>{t.w}, optim::SGDOptions(1e-4));
  t.opt->set_master_weights(master);
  for (int i = 0; i < steps; ++i) {
    t.w.set_grad(ones({4}, dt));
    t.opt->step();
  }
  return t;
}

}  // namespace

TEST_CASE("master weights keep an update that a pure 16-bit weight rounds away") {
  for (DType dt : {kFloat16, kBFloat16}) {
    const std::string name(dtype_name(dt));
    CAPTURE(name);
    Tensor pure = train_small_updates(dt, /*master=*/false, 100).w;
    CHECK(pure.to_vector<double>() == std::vector<double>(4, 1.0));  // 100 updates lost

    Trained t = train_small_updates(dt, /*master=*/true, 100);
    const Tensor& w = t.w;
    const Tensor& m = t.opt->master(0);
    REQUIRE(m.defined());
    CHECK(m.dtype() == kFloat32);
    CHECK(m.to_vector<double>()[0] == doctest::Approx(0.99).epsilon(1e-5));  // 1 - 100 * 1e-4
    CHECK(w.dtype() == dt);                                                   // the model keeps its dtype
    CHECK(test::identical(w.detach(), m.to(dt)));                             // and holds the rounded master
    CHECK(w.to_vector<double>()[0] < 0.995);
  }
}

TEST_CASE("with master weights the optimizer state is f32; f32 parameters keep no copy") {
  Tensor low = randn({3, 2}).to(kBFloat16).set_requires_grad(true);
  Tensor f32 = randn({2}).set_requires_grad(true);
  optim::Adam opt({low, f32}, optim::AdamOptions(1e-3));
  opt.set_master_weights();
  low.set_grad(ones({3, 2}, kBFloat16));
  f32.set_grad(ones({2}));
  opt.step();
  CHECK(opt.state(0).at("exp_avg").dtype() == kFloat32);
  CHECK(opt.state(0).at("exp_avg_sq").dtype() == kFloat32);
  CHECK(opt.state(1).at("exp_avg").dtype() == kFloat32);
  CHECK(opt.master(0).defined());
  CHECK(!opt.master(1).defined());
  CHECK(low.dtype() == kBFloat16);
  // An f32 gradient (what GradScaler.unscale_ leaves) is used as is.
  low.set_grad(full({3, 2}, 0.5));
  opt.step();
  CHECK(test::identical(low.detach(), opt.master(0).to(kBFloat16)));
}

TEST_CASE("master copies go through state_dict and checkpoints exactly") {
  manual_seed(3);
  auto make = [] {
    nn::ModulePtr<nn::Sequential> m = nn::Sequential{nn::Linear(4, 3)};
    m->to(kFloat16);
    return m;
  };
  auto model = make();
  optim::SGD opt(model->parameters(), optim::SGDOptions(1e-3).set_momentum(0.9));
  opt.set_master_weights();
  for (int i = 0; i < 3; ++i) {
    for (Tensor p : model->parameters()) p.set_grad(full(p.sizes(), 0.37 * (i + 1), kFloat16));
    opt.step();
  }
  optim::StateDict sd = opt.state_dict();
  REQUIRE(sd.count("master.0"));
  CHECK(sd.at("master.0").dtype() == kFloat32);
  CHECK(sd.at("state.0.momentum_buffer").dtype() == kFloat32);

  const std::string path = test::scratch_dir("master_weights") + "/o2.safetensors";
  train::save_checkpoint(path, *model, &opt, {});
  auto model2 = make();
  optim::SGD opt2(model2->parameters(), optim::SGDOptions(1e-3).set_momentum(0.9));
  opt2.set_master_weights();
  train::load_checkpoint(path, *model2, &opt2);
  for (int64_t i = 0; i < opt.num_params(); ++i) {
    CAPTURE(i);
    CHECK(test::identical(opt2.master(i), opt.master(i)));
    CHECK(test::identical(opt2.state(i).at("momentum_buffer"), opt.state(i).at("momentum_buffer")));
  }
  auto p1 = model->parameters(), p2 = model2->parameters();
  for (size_t i = 0; i < p1.size(); ++i) CHECK(test::identical(p1[i].detach(), p2[i].detach()));
  // One more identical step on both: they stay identical (the exact masters came back).
  for (auto* ps : {&p1, &p2})
    for (Tensor p : *ps) p.set_grad(full(p.sizes(), 0.11, kFloat16));
  opt.step();
  opt2.step();
  for (size_t i = 0; i < p1.size(); ++i) CHECK(test::identical(p1[i].detach(), p2[i].detach()));

  // An optimizer without master weights refuses the copies, saying what to do.
  auto model3 = make();
  optim::SGD plain(model3->parameters(), optim::SGDOptions(1e-3).set_momentum(0.9));
  std::string msg = error_of([&] { plain.load_state_dict(sd); });
  CHECK(contains(msg, "master.0"));
  CHECK(contains(msg, "set_master_weights"));
}

TEST_CASE("a state without master copies (an O1 run) makes fresh ones from the loaded weights") {
  Tensor w = full({2}, 0.5, kBFloat16).set_requires_grad(true);
  optim::SGD o1({w}, optim::SGDOptions(0.25));
  w.set_grad(ones({2}, kBFloat16));
  o1.step();  // w = 0.25, no masters
  optim::SGD o2({w}, optim::SGDOptions(0.25));
  o2.set_master_weights();
  o2.load_state_dict(o1.state_dict());
  CHECK(!o2.master(0).defined());
  w.set_grad(ones({2}, kBFloat16));
  o2.step();
  CHECK(o2.master(0).to_vector<double>() == std::vector<double>{0.0, 0.0});
}

TEST_CASE("an f16 model trains with master weights, autocast and a GradScaler (O2)") {
  manual_seed(5);
  nn::ModulePtr<nn::Sequential> model = nn::Sequential{nn::Linear(8, 16), nn::ReLU(), nn::Linear(16, 4)};
  model->to(kFloat16);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
  opt.set_master_weights();
  amp::GradScaler scaler;
  Tensor x = randn({32, 8});
  Tensor y = argmax(x.narrow(1, 0, 4), 1);  // learnable: the largest of the first four inputs
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    Tensor loss;
    {
      amp::AutocastGuard autocast(kFloat16);
      loss = nn::functional::cross_entropy(model(x), y);  // f32 input cast down to f16
    }
    CHECK(loss.dtype() == kFloat32);
    opt.zero_grad();
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(last < 0.5 * first);
  for (const Tensor& p : model->parameters()) CHECK(p.dtype() == kFloat16);
}
