// GradScaler: the scale's growth and backoff, steps skipped on injected inf/NaN, unscale-then-clip
// equal to clipping the true gradients, f16 gradients unscaled without flushing, the found-inf
// reducer hook of data parallel, misuse errors, and the state's round trip through checkpoints.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

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

constexpr double kInf = std::numeric_limits<double>::infinity();

/// One iteration on a parameter whose gradient is set by hand to `grad` times the scale (what
/// backward of a scaled loss would give). Returns whether the optimizer stepped.
bool iterate(amp::GradScaler& scaler, optim::Optimizer& opt, Tensor& p, double grad) {
  p.set_grad(full(p.sizes(), grad * scaler.scale()));
  bool stepped = scaler.step(opt);
  scaler.update();
  return stepped;
}

}  // namespace

TEST_CASE("defaults: scale 2^16, growth x2 after 2000 clean steps") {
  amp::GradScaler scaler;
  CHECK(scaler.scale() == 65536.0);
  Tensor p = zeros({3}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.0));
  for (int i = 0; i < 1999; ++i) REQUIRE(iterate(scaler, opt, p, 0.5));
  CHECK(scaler.scale() == 65536.0);
  CHECK(scaler.growth_tracker() == 1999);
  CHECK(iterate(scaler, opt, p, 0.5));
  CHECK(scaler.scale() == 131072.0);
  CHECK(scaler.growth_tracker() == 0);
  CHECK(scaler.skipped_steps() == 0);
}

TEST_CASE("an inf or NaN gradient skips the step, halves the scale and resets the growth count") {
  amp::GradScaler scaler({.growth_interval = 3});
  Tensor p = ones({4}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));

  CHECK(iterate(scaler, opt, p, 1.0));  // p = 1 - 0.1
  CHECK(iterate(scaler, opt, p, 1.0));  // 0.8
  CHECK(scaler.growth_tracker() == 2);
  const Tensor before = p.detach().clone();
  for (double bad : {kInf, -kInf, std::nan("")}) {
    CAPTURE(bad);
    const double s = scaler.scale();
    p.set_grad(tensor({1.0, bad, 1.0, 1.0}) * s);
    CHECK(!scaler.step(opt));
    scaler.update();
    CHECK(test::identical(p.detach(), before));  // the step was skipped
    CHECK(scaler.scale() == s * 0.5);
    CHECK(scaler.growth_tracker() == 0);
  }
  CHECK(scaler.skipped_steps() == 3);
  CHECK(scaler.scale() == 8192.0);
  // Growth restarts from zero: three clean steps double the scale again.
  for (int i = 0; i < 3; ++i) CHECK(iterate(scaler, opt, p, 1.0));
  CHECK(scaler.scale() == 16384.0);
  CHECK(p.detach().to_vector<float>()[0] == doctest::Approx(0.5).epsilon(1e-6));
}

TEST_CASE("unscale_ divides the gradients by the scale and the step sees the true gradient") {
  amp::GradScaler scaler({.init_scale = 1024.0});
  Tensor w = tensor({1.0, 2.0, 3.0}).set_requires_grad(true);
  optim::SGD opt({w}, optim::SGDOptions(0.5));
  Tensor loss = (w * w).sum();  // d/dw = 2w
  scaler.scale(loss).backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{2048.f, 4096.f, 6144.f});
  scaler.unscale_(opt);
  CHECK(w.grad().to_vector<float>() == std::vector<float>{2.f, 4.f, 6.f});
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(w.detach().to_vector<float>() == std::vector<float>{0.f, 0.f, 0.f});
}

TEST_CASE("unscale_ then clip equals clipping the true gradients") {
  manual_seed(11);
  nn::Sequential model({std::make_shared<nn::Linear>(6, 8), std::make_shared<nn::Tanh>(),
                        std::make_shared<nn::Linear>(8, 3)});
  Tensor x = randn({5, 6});
  Tensor y = tensor<int64_t>({0, 2, 1, 1, 0});
  auto loss_of = [&] { return nn::functional::cross_entropy(model(x), y); };
  const double max_norm = 0.05;  // well below the gradient's norm, so clipping acts

  loss_of().backward();
  const double true_norm = optim::clip_grad_norm_(model.parameters(), max_norm);
  std::vector<Tensor> want;
  for (const Tensor& p : model.parameters()) want.push_back(p.grad().clone());
  REQUIRE(true_norm > 10 * max_norm);

  model.zero_grad();
  optim::SGD opt(model.parameters(), optim::SGDOptions(0.1));
  amp::GradScaler scaler;
  scaler.scale(loss_of()).backward();
  scaler.unscale_(opt);
  const double norm = optim::clip_grad_norm_(model.parameters(), max_norm);
  CHECK(norm == doctest::Approx(true_norm).epsilon(1e-6));
  auto params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    CAPTURE(i);
    CHECK(test::scaled_error(params[i].grad(), want[i]) < 1e-6);
  }
  CHECK(scaler.step(opt));  // the clipped gradients are what it steps on
  scaler.update();
}

TEST_CASE("f16 gradients are widened to f32 before unscaling, so small values survive") {
  // 3e-7 is an f16 subnormal (spacing 6e-8): unscaling in f16 would keep ~1 significant digit.
  const double tiny = 3e-7;
  amp::GradScaler scaler;
  Tensor p = ones({2}, kFloat16).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.0));
  p.set_grad(full({2}, tiny * scaler.scale(), kFloat16));  // 0.0197: a normal f16
  scaler.unscale_(opt);
  CHECK(p.grad().dtype() == kFloat32);
  const double got = p.grad().to_vector<double>()[0];
  CHECK(std::fabs(got - tiny) < 1e-3 * tiny);
  const double in_f16 = (full({1}, tiny * scaler.scale(), kFloat16) / scaler.scale()).item<double>();
  CHECK(std::fabs(in_f16 - tiny) > 1e-2 * tiny);  // what in-place f16 unscaling would have given
  CHECK(scaler.step(opt));
  scaler.update();
}

TEST_CASE("the found-inf reducer decides for every rank: a flag raised elsewhere skips the step here") {
  amp::GradScaler scaler;
  Tensor p = ones({3}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  int calls = 0;
  scaler.set_found_inf_reducer([&](Tensor& found_inf) {
    ++calls;
    CHECK(found_inf.dtype() == kFloat32);
    CHECK(found_inf.numel() == 1);
    CHECK(found_inf.item<double>() == 0.0);  // this rank's gradients are finite
    found_inf.fill_(1.0);                    // another rank's were not (all-reduce max)
  });
  p.set_grad(full({3}, scaler.scale()));
  CHECK(!scaler.step(opt));
  scaler.update();
  CHECK(calls == 1);
  CHECK(p.detach().to_vector<float>() == std::vector<float>{1.f, 1.f, 1.f});
  CHECK(scaler.skipped_steps() == 1);
  CHECK(scaler.scale() == 32768.0);
}

TEST_CASE("misuse within an iteration is refused, naming the call") {
  amp::GradScaler scaler;
  Tensor p = ones({2}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  CHECK(contains(error_of([&] { scaler.update(); }), "GradScaler.update: no inf/NaN check"));
  p.set_grad(ones({2}));
  scaler.unscale_(opt);
  CHECK(contains(error_of([&] { scaler.unscale_(opt); }), "GradScaler.unscale_: already called"));
  scaler.step(opt);
  CHECK(contains(error_of([&] { scaler.step(opt); }), "GradScaler.step: already called"));
  CHECK(contains(error_of([&] { scaler.unscale_(opt); }), "after step()"));
  scaler.update();
  p.set_grad(ones({2}));
  CHECK(error_of([&] { scaler.unscale_(opt); }).empty());  // a new iteration
  CHECK(contains(error_of([] { amp::GradScaler s({.growth_factor = 0.5}); }), "growth_factor must be > 1, got 0.5"));
  CHECK(contains(error_of([] { amp::GradScaler s({.backoff_factor = 1.0}); }), "backoff_factor"));
  CHECK(contains(error_of([] { amp::GradScaler s({.init_scale = -1.0}); }), "scale must be positive"));
  CHECK(contains(error_of([&] { scaler.scale(tensor<int64_t>({1})); }), "GradScaler.scale: the loss must be a floating"));
}

TEST_CASE("scale() returns the loss times the scale in f32, also for a 16-bit loss") {
  amp::GradScaler scaler;
  Tensor loss = full({}, 2.0, kFloat16);  // 2 * 65536 overflows f16
  Tensor s = scaler.scale(loss);
  CHECK(s.dtype() == kFloat32);
  CHECK(s.item<double>() == 131072.0);
}

TEST_CASE("a disabled scaler passes everything through") {
  amp::GradScaler scaler({.enabled = false});
  Tensor p = ones({2}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.5));
  Tensor loss = (p * 3.0).sum();
  CHECK(scaler.scale(loss).is_same(loss));
  CHECK(scaler.scale() == 1.0);
  loss.backward();
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(p.detach().to_vector<float>() == std::vector<float>{-0.5f, -0.5f});
}

TEST_CASE("the scaler's state survives a checkpoint exactly, and a bad one is refused") {
  amp::GradScaler scaler({.growth_interval = 5});
  Tensor p = ones({2}).set_requires_grad(true);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  iterate(scaler, opt, p, kInf);
  iterate(scaler, opt, p, 1.0);
  iterate(scaler, opt, p, 1.0);
  REQUIRE(scaler.skipped_steps() == 1);
  REQUIRE(scaler.growth_tracker() == 2);

  nn::Sequential model({std::make_shared<nn::Linear>(2, 2)});
  train::TrainingState st;
  scaler.save_to(st.extra);
  const std::string path = test::scratch_dir("grad_scaler") + "/ckpt.safetensors";
  train::save_checkpoint(path, model, nullptr, st);
  train::TrainingState back = train::load_checkpoint(path, model, nullptr);

  amp::GradScaler restored;
  restored.load_from(back.extra);
  CHECK(restored.state_dict() == scaler.state_dict());
  CHECK(restored.scale() == 32768.0);
  CHECK(restored.skipped_steps() == 1);
  // It carries on as the original would: three more clean steps reach the interval of 5.
  for (int i = 0; i < 3; ++i) iterate(restored, opt, p, 1.0);
  CHECK(restored.scale() == 65536.0);

  auto broken = back.extra;
  broken.erase("grad_scaler.scale");
  CHECK(contains(error_of([&] { amp::GradScaler s; s.load_from(broken); }), "no 'grad_scaler.scale'"));
  broken = back.extra;
  broken["grad_scaler.growth_tracker"] = std::string("two");
  CHECK(contains(error_of([&] { amp::GradScaler s; s.load_from(broken); }), "'grad_scaler.growth_tracker' is 'two'"));
  broken["grad_scaler.growth_tracker"] = std::string("7");  // not below growth_interval = 5
  amp::GradScaler untouched;
  CHECK(contains(error_of([&] { untouched.load_from(broken); }), "growth_tracker 7 must be below"));
  CHECK(untouched.scale() == 65536.0);
}
