// train::Trainer in one process on the synthetic Fashion-MNIST-format data: it learns any model
// with any loss, logs a progress line with an ETA, accumulates and clips gradients, trains in
// mixed precision, resumes a run stopped mid-epoch bit-identically, and refuses bad options by name.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/ops.h"
#include "tests/train/fit_helpers.h"
#include "train/progress.h"

using namespace kiln;
namespace fs = std::filesystem;
using train::FitOptions;
using train::Trainer;

TEST_CASE("an MLP learns the synthetic classes through fit, validated each epoch, with progress lines") {
  fs::path dir = test::make_data_dir();
  data::DataLoader train_loader(test::synthetic_set(dir, true), {.batch_size = 64, .shuffle = true, .seed = 0});
  data::DataLoader val_loader(test::synthetic_set(dir, false), {.batch_size = 100});
  std::ostringstream log;
  FitOptions o = test::quiet();
  o.log_every = 5;
  o.log = &log;
  Trainer trainer(test::small_mlp(), o);
  train::FitResult r = trainer.fit(train_loader, &val_loader);
  CHECK(r.steps == 20);
  CHECK(r.epochs_done == 2);
  REQUIRE(r.epochs.size() == 2);
  REQUIRE(r.step_losses.size() == 20);
  CHECK(r.step_losses.back() < 0.5 * r.step_losses.front());
  CHECK(r.epochs[1].train_loss < r.epochs[0].train_loss);
  REQUIRE(r.val_accuracy.has_value());
  CHECK(*r.val_accuracy > 0.9);
  CHECK(*r.epochs[1].val_loss == *r.val_loss);
  CHECK(r.samples_per_sec > 0);
  CHECK(!r.stopped_early);
  const std::string text = log.str();
  CHECK(text.find("step 5/20 epoch 1/2 loss ") != std::string::npos);
  CHECK(text.find("step 20/20 epoch 2/2 loss ") != std::string::npos);
  CHECK(text.find(" eta 0:00") != std::string::npos);
  CHECK(text.find("epoch 2/2 done: train_loss ") != std::string::npos);
  // evaluate() alone gives the last validation's numbers.
  train::EvalMetrics ev = trainer.evaluate(val_loader);
  CHECK(ev.loss == *r.val_loss);
  CHECK(ev.samples == 200);
}

TEST_CASE("the progress line shows step, epoch, loss, speed, elapsed time and the ETA") {
  // 50 of this run's steps took 30 s: the remaining 150 take 90 s.
  train::Progress p{.step = 50, .total_steps = 200, .epoch = 1, .epochs = 4, .loss = 0.25, .samples_per_sec = 1234.4,
                    .elapsed_s = 30, .run_steps = 50};
  CHECK(train::eta_seconds(p) == doctest::Approx(90));
  CHECK(train::progress_line(p) == "step 50/200 epoch 1/4 loss 0.2500 1234 samples/s elapsed 0:30 eta 1:30");
  // A resumed run: 10 steps of this invocation took 20 s, 100 of 200 are done.
  p.step = 100;
  p.run_steps = 10;
  p.elapsed_s = 20;
  CHECK(train::eta_seconds(p) == doctest::Approx(200));
  CHECK(train::format_duration(3725) == "1:02:05");
  CHECK(train::format_duration(59.6) == "1:00");
  CHECK(train::format_duration(-1) == "?");
}

TEST_CASE("any module and loss: a hand-written regression module fits y = 3x + 1 under MSE") {
  struct Affine : nn::Module {
    Affine() {
      w = register_parameter("w", zeros({1}));
      b = register_parameter("b", zeros({1}));
    }
    Tensor forward(const Tensor& x) override { return x * w + b; }
    Tensor w, b;
  };
  manual_seed(1);
  Tensor x = randn({256});
  auto ds = std::make_shared<data::TensorDataset>(x, x * 3.0 + 1.0);
  data::DataLoader loader(ds, {.batch_size = 32, .shuffle = true, .seed = 1});
  FitOptions o = test::quiet(20);
  o.lr = 0.1;
  o.loss = [](const Tensor& out, const Tensor& y) { return nn::functional::mse_loss(out, y); };
  auto model = std::make_shared<Affine>();
  Trainer trainer(model, o);
  train::FitResult r = trainer.fit(loader, &loader);
  CHECK(r.step_losses.back() < 1e-3 * r.step_losses.front());
  CHECK(model->w.item<double>() == doctest::Approx(3).epsilon(1e-3));
  CHECK(model->b.item<double>() == doctest::Approx(1).epsilon(1e-3));
  CHECK(r.val_loss.has_value());
  CHECK(!r.val_accuracy.has_value());  // float targets: no accuracy
}

TEST_CASE("two accumulated micro-batches of 32 step as one batch of 64") {
  fs::path dir = test::make_data_dir();
  auto set = test::synthetic_set(dir, true);
  data::DataLoader big(set, {.batch_size = 64}), small(set, {.batch_size = 32});
  FitOptions o = test::quiet(1);
  auto a = test::small_mlp(), b = test::small_mlp();
  train::FitResult ra = Trainer(a, o).fit(big);
  o.grad_accum = 2;
  train::FitResult rb = Trainer(b, o).fit(small);
  CHECK(ra.steps == 10);
  CHECK(rb.steps == 10);
  CHECK(test::max_param_diff(*a, *b) < 1e-5);
  CHECK(test::max_param_diff(*a, *test::small_mlp()) > 1e-2);  // it trained
  for (size_t i = 0; i < ra.step_losses.size(); ++i) CHECK(rb.step_losses[i] == doctest::Approx(ra.step_losses[i]));
}

TEST_CASE("clipping by the global norm bounds the step of plain SGD to lr * max_norm") {
  fs::path dir = test::make_data_dir();
  data::DataLoader loader(test::synthetic_set(dir, true), {.batch_size = 64});
  struct Norms : train::Callback {
    void on_step_end(train::Trainer&, const train::StepMetrics& s) override { norm = s.grad_norm; }
    double norm = 0;
  };
  auto norms = std::make_shared<Norms>();
  FitOptions o = test::quiet(1);
  o.lr = 1;
  o.momentum = 0;
  o.max_steps = 1;
  o.clip_grad_norm = 1e-3;
  auto model = test::small_mlp();
  Trainer trainer(model, o);
  trainer.add_callback(norms);
  trainer.fit(loader);
  CHECK(norms->norm > 0.1);  // the unclipped norm: clipping had to act
  double sq = 0;
  auto before = test::small_mlp()->parameters(), after = model->parameters();
  for (size_t i = 0; i < after.size(); ++i) sq += (after[i] - before[i]).pow(2).sum().item<double>();
  CHECK(std::sqrt(sq) == doctest::Approx(1e-3).epsilon(1e-3));
}

TEST_CASE("bf16 autocast and f16 with master weights learn the synthetic classes") {
  fs::path dir = test::make_data_dir();
  data::DataLoader loader(test::synthetic_set(dir, true), {.batch_size = 64, .shuffle = true, .seed = 0});
  data::DataLoader val(test::synthetic_set(dir, false), {.batch_size = 100});
  for (auto [precision, master] : {std::pair{train::Precision::bf16, false}, {train::Precision::f16, true}}) {
    CAPTURE(master);
    FitOptions o = test::quiet();
    o.precision = precision;
    o.master_weights = master;
    auto model = test::small_mlp();
    train::FitResult r = Trainer(model, o).fit(loader, &val);
    CHECK(r.step_losses.back() < 0.5 * r.step_losses.front());
    CHECK(*r.val_accuracy > 0.9);
    CHECK(model->parameters()[0].dtype() == (master ? kFloat16 : kFloat32));
  }
}

TEST_CASE("the same seed gives bit-identical losses, and a run stopped mid-epoch resumes exactly") {
  // Adam, the cosine schedule and dropout: optimizer state, schedule position, data order and the
  // generator must all come back.
  fs::path dir = test::make_data_dir();
  auto train_set = test::synthetic_set(dir, true);
  auto run = [&](const std::string& ckpt, std::shared_ptr<train::Callback> cb) {
    FitOptions o = test::quiet();
    o.optimizer = train::Optimizer::adam;
    o.lr = 1e-3;
    o.schedule = train::Schedule::cosine;
    o.checkpoint = ckpt;
    o.save_every = 4;
    auto model = test::small_mlp(0.2);
    data::DataLoader loader(train_set, {.batch_size = 64, .shuffle = true});  // seed drawn from the generator
    Trainer trainer(model, o);
    if (cb) trainer.add_callback(cb);
    return trainer.fit(loader);
  };
  const std::string full_ckpt = (dir / "fit_full.safetensors").string(), part_ckpt = (dir / "fit_part.safetensors").string();
  fs::remove(full_ckpt);
  fs::remove(part_ckpt);
  train::FitResult full = run(full_ckpt, nullptr);
  fs::remove(full_ckpt);
  train::FitResult again = run(full_ckpt, nullptr);
  CHECK(full.step_losses == again.step_losses);

  train::FitResult p1 = run(part_ckpt, std::make_shared<test::StopAt>(7));
  CHECK(p1.steps == 7);
  CHECK(p1.stopped_early);
  CHECK(p1.epochs_done == 0);
  train::FitResult p2 = run(part_ckpt, std::make_shared<test::StopAt>(13));  // across the epoch's end
  CHECK(p2.steps == 13);
  CHECK(p2.epochs_done == 1);
  train::FitResult p3 = run(part_ckpt, nullptr);
  CHECK(p3.steps == 20);
  std::vector<double> stitched = p1.step_losses;
  stitched.insert(stitched.end(), p2.step_losses.begin(), p2.step_losses.end());
  stitched.insert(stitched.end(), p3.step_losses.begin(), p3.step_losses.end());
  CHECK(stitched == full.step_losses);
  CHECK(test::file_bytes(part_ckpt) == test::file_bytes(full_ckpt));  // weights, Adam, generator: all equal
  train::FitResult done = run(part_ckpt, nullptr);  // a finished run resumed does nothing
  CHECK(done.steps == 20);
  CHECK(done.step_losses.empty());
}

TEST_CASE("max_steps stops inside an epoch and is the schedule's horizon") {
  fs::path dir = test::make_data_dir();
  data::DataLoader loader(test::synthetic_set(dir, true), {.batch_size = 64});
  FitOptions o = test::quiet(3);
  o.max_steps = 5;
  o.schedule = train::Schedule::cosine;
  struct Lrs : train::Callback {
    void on_step_end(train::Trainer&, const train::StepMetrics& s) override { lrs.push_back(s.lr); }
    std::vector<double> lrs;
  };
  auto lrs = std::make_shared<Lrs>();
  Trainer trainer(test::small_mlp(), o);
  trainer.add_callback(lrs);
  train::FitResult r = trainer.fit(loader);
  CHECK(r.steps == 5);
  CHECK(r.epochs.empty());
  REQUIRE(lrs->lrs.size() == 5);
  for (int k = 0; k < 5; ++k) CHECK(lrs->lrs[k] == doctest::Approx(0.05 * (1 + std::cos(M_PI * k / 5)) / 2));
}

TEST_CASE("bad options are refused, naming the option and the value") {
  fs::path dir = test::make_data_dir();
  data::DataLoader loader(test::synthetic_set(dir, true), {.batch_size = 64});
  auto error_of = [&](FitOptions o) -> std::string {
    try {
      Trainer(test::small_mlp(), o).fit(loader);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  FitOptions o = test::quiet();
  o.grad_accum = 0;
  CHECK(error_of(o).find("grad_accum must be >= 1, got 0") != std::string::npos);
  o = test::quiet();
  o.epochs = 0;
  CHECK(error_of(o).find("epochs (0) or max_steps (0) must be positive") != std::string::npos);
  o = test::quiet();
  o.master_weights = true;
  CHECK(error_of(o).find("master_weights") != std::string::npos);
  o = test::quiet();
  o.save_every = 3;
  CHECK(error_of(o).find("save_every 3 needs a checkpoint path") != std::string::npos);
  o = test::quiet();
  o.strategy = train::DataParallel{.zero_stage = 2};
  CHECK(error_of(o).find("zero_stage 2") != std::string::npos);
  o.strategy = train::DataParallel{};
  unsetenv("WORLD_SIZE");
  CHECK(error_of(o).find("WORLD_SIZE is not set") != std::string::npos);
  CHECK_THROWS_WITH_AS(Trainer(nullptr, test::quiet()), doctest::Contains("the model is null"), Error);
}
