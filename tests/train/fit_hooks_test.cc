// The Trainer's step hooks and the run options the main job moved onto it: the callbacks run in
// the documented order with the loss and gradients they promise, the run monitor's phases (timed
// by those hooks) sum to the step time, SIGTERM stops fit after the step with a checkpoint that
// resumes exactly, stop_after_steps/epochs and resume_from slice a run, f16's loss scale reaches
// StepMetrics, and cuda_graph is refused off CUDA (and matches eager steps on a GPU).
#include <doctest/doctest.h>

#include <csignal>
#include <cmath>
#include <sstream>

#include "nn/safetensors.h"
#include "tests/train/fit_helpers.h"
#include "train/graph_step.h"
#include "train/run_monitor.h"

using namespace kiln;
namespace fs = std::filesystem;
using train::FitOptions;
using train::Trainer;

namespace {

/// The synthetic training set (640 images) in shuffled batches of 64: 10 steps per epoch.
std::unique_ptr<data::DataLoader> train_batches(const fs::path& dir) {
  return std::make_unique<data::DataLoader>(test::synthetic_set(dir, true),
                                            data::DataLoaderOptions{.batch_size = 64, .shuffle = true, .seed = 0});
}

/// Writes every hook it sees, with the loss each forward reports and whether the optimizer step
/// saw gradients and changed the weights.
class Recorder : public train::Callback {
 public:
  std::vector<std::string> calls;
  std::vector<double> forward_losses;
  std::vector<train::StepMetrics> steps;
  bool grads_before_step = true, weights_moved = true;

  void on_train_begin(Trainer&) override { calls.push_back("train_begin"); }
  void on_epoch_begin(Trainer&, int64_t epoch) override { calls.push_back("epoch_begin " + std::to_string(epoch)); }
  void on_batch_begin(Trainer&, const data::Example& b) override {
    calls.push_back("batch " + std::to_string(b.target.size(0)));
  }
  void on_after_forward(Trainer&, const Tensor& loss) override {
    calls.push_back("forward");
    forward_losses.push_back(loss.item<double>());
  }
  void on_after_backward(Trainer&) override { calls.push_back("backward"); }
  void on_before_optimizer_step(Trainer& t) override {
    calls.push_back("before_step");
    const Tensor w = t.model().parameters().front();
    grads_before_step = grads_before_step && w.grad().defined() && w.grad().abs().sum().item<double>() > 0;
    weight_ = w.detach().clone();
  }
  void on_step_end(Trainer& t, const train::StepMetrics& s) override {
    calls.push_back("step_end " + std::to_string(s.step));
    weights_moved = weights_moved && (weight_ - t.model().parameters().front()).abs().max().item<double>() > 0;
    steps.push_back(s);
  }
  void on_validation_begin(Trainer&) override { calls.push_back("validation_begin"); }
  void on_validation_end(Trainer&) override { calls.push_back("validation_end"); }
  void on_epoch_end(Trainer&, const train::EpochMetrics& m) override {
    calls.push_back("epoch_end " + std::to_string(m.epoch));
  }
  void on_train_end(Trainer&, const train::FitResult&) override { calls.push_back("train_end"); }

 private:
  Tensor weight_;
};

/// Raises `sig` in this process after global step `step` (a preemption arriving mid-run).
class RaiseAt : public train::Callback {
 public:
  RaiseAt(int64_t step, int sig) : step_(step), sig_(sig) {}
  void on_step_end(Trainer&, const train::StepMetrics& s) override {
    if (s.step == step_) std::raise(sig_);
  }

 private:
  int64_t step_;
  int sig_;
};

}  // namespace

TEST_CASE("the hooks run in order: epoch, each micro-batch's batch/forward/backward, then the step") {
  // 640 images in batches of 160 with two micro-batches per step: 2 steps per epoch.
  fs::path dir = test::make_data_dir();
  data::DataLoader train_loader(test::synthetic_set(dir, true), {.batch_size = 160, .shuffle = true, .seed = 0});
  data::DataLoader val_loader(test::synthetic_set(dir, false), {.batch_size = 100});
  FitOptions o = test::quiet();
  o.grad_accum = 2;
  Trainer trainer(test::small_mlp(), o);
  auto rec = std::make_shared<Recorder>();
  trainer.add_callback(rec);
  train::FitResult r = trainer.fit(train_loader, &val_loader);
  REQUIRE(r.steps == 4);

  std::vector<std::string> want{"train_begin"};
  int64_t step = 0;
  for (int epoch = 0; epoch < 2; ++epoch) {
    want.push_back("epoch_begin " + std::to_string(epoch));
    for (int s = 0; s < 2; ++s) {
      for (int micro = 0; micro < 2; ++micro)
        for (const char* c : {"batch 160", "forward", "backward"}) want.push_back(c);
      want.push_back("before_step");
      want.push_back("step_end " + std::to_string(++step));
    }
    for (const char* c : {"validation_begin", "validation_end"}) want.push_back(c);
    want.push_back("epoch_end " + std::to_string(epoch));
  }
  want.push_back("train_end");
  CHECK(rec->calls == want);
  // The step's loss is the mean of its micro-batches' forward losses; the optimizer step saw
  // gradients and moved the weights; each step counts all its samples.
  REQUIRE(rec->forward_losses.size() == 8);
  REQUIRE(rec->steps.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(rec->steps[i].loss == (rec->forward_losses[2 * i] + rec->forward_losses[2 * i + 1]) / 2);
    CHECK(rec->steps[i].samples == 320);
    CHECK(rec->steps[i].loss_scale == 1);
  }
  CHECK(rec->grads_before_step);
  CHECK(rec->weights_moved);
}

TEST_CASE("the run monitor as a callback: its phases sum to the step time, and it logs every log_every steps") {
  fs::path dir = test::make_data_dir();
  data::DataLoader train_loader(test::synthetic_set(dir, true), {.batch_size = 64, .shuffle = true, .seed = 0});
  Trainer trainer(test::small_mlp(), test::quiet());
  std::ostringstream out;
  auto monitor = std::make_shared<train::RunMonitor>(train::MonitorConfig{.log_every = 5}, 0,
                                                     /*flops_per_sample=*/0, /*device_is_cuda=*/false, out);
  trainer.add_callback(monitor);
  train::FitResult r = trainer.fit(train_loader);
  REQUIRE(r.steps == 20);
  using train::Phase;
  double sum = 0;
  for (Phase p : {Phase::kData, Phase::kForward, Phase::kBackward, Phase::kForwardBackward, Phase::kExposedComm,
                  Phase::kOptimizer, Phase::kRest})
    sum += monitor->total_seconds(p);
  // Every interval between two marks goes to one phase: the sum is the steps' time, to rounding.
  CHECK(std::fabs(sum - monitor->step_seconds()) <= 1e-9 * monitor->step_seconds() + 1e-12);
  CHECK(monitor->total_seconds(Phase::kForward) > 0);
  CHECK(monitor->total_seconds(Phase::kBackward) > 0);
  CHECK(monitor->total_seconds(Phase::kOptimizer) > 0);
  CHECK(monitor->total_seconds(Phase::kExposedComm) == 0);  // one process: no communication
  // The steps are (nearly) all of the epochs' training time: nothing between them goes untimed.
  const double epochs_s = r.epochs[0].seconds + r.epochs[1].seconds;
  CHECK(monitor->step_seconds() <= epochs_s);
  CHECK(monitor->step_seconds() >= 0.5 * epochs_s);
  const std::string text = out.str();
  int lines = 0;
  for (size_t at = text.find("breakdown per step: data "); at != std::string::npos;
       at = text.find("breakdown per step: data ", at + 1))
    ++lines;
  CHECK(lines == 4);
  CHECK(text.find(" forward ") != std::string::npos);
  CHECK(text.find(" optimizer ") != std::string::npos);
}

TEST_CASE("SIGTERM during fit: the step finishes, the checkpoint is written, and the resumed run is exact") {
  fs::path dir = test::make_data_dir();
  FitOptions o = test::quiet();
  o.optimizer = train::Optimizer::adam;
  o.lr = 1e-3;
  o.schedule = train::Schedule::cosine;
  o.handle_preemption = true;
  o.checkpoint = (dir / "full.safetensors").string();
  {
    auto l = train_batches(dir);
    Trainer full(test::small_mlp(0.2), o);
    CHECK(!full.fit(*l).preempted);
  }
  o.checkpoint = (dir / "part.safetensors").string();
  std::ostringstream log;
  o.log = &log;
  {
    auto l = train_batches(dir);
    Trainer part(test::small_mlp(0.2), o);
    part.add_callback(std::make_shared<RaiseAt>(3, SIGTERM));
    train::FitResult r = part.fit(*l);
    CHECK(r.preempted);
    CHECK(r.stopped_early);
    CHECK(r.steps == 3);
  }
  CHECK(log.str().find("preempted: stopped after step 3, saved to " + o.checkpoint) != std::string::npos);
  auto meta = nn::load_safetensors(o.checkpoint).metadata;
  CHECK(meta.at("kiln.step") == "3");
  CHECK(meta.at("kiln.batch") == "3");
  {
    auto l = train_batches(dir);
    Trainer rest(test::small_mlp(0.2), o);  // resume (the default) picks the checkpoint up
    train::FitResult r = rest.fit(*l);
    CHECK(!r.preempted);
    CHECK(r.steps == 20);
  }
  CHECK(test::file_bytes(o.checkpoint) == test::file_bytes(dir / "full.safetensors"));
}

TEST_CASE("stop_after_steps, stop_after_epochs and resume_from slice one run into exact parts") {
  fs::path dir = test::make_data_dir();
  FitOptions o = test::quiet(3);
  o.schedule = train::Schedule::cosine;  // spans all 3 epochs in every part
  o.checkpoint = (dir / "whole.safetensors").string();
  std::vector<double> whole;
  {
    auto l = train_batches(dir);
    Trainer t(test::small_mlp(), o);
    whole = t.fit(*l).step_losses;
  }
  REQUIRE(whole.size() == 30);
  std::vector<double> parts;
  o.checkpoint = (dir / "a.safetensors").string();
  o.stop_after_steps = 7;
  {
    auto l = train_batches(dir);
    Trainer t(test::small_mlp(), o);
    train::FitResult r = t.fit(*l);
    CHECK(r.steps == 7);
    CHECK(r.stopped_early);
    CHECK(!r.preempted);
    parts = r.step_losses;
  }
  // Read from a, written to b: this part finishes epoch 1 (steps 8-10) and stops there.
  o.resume_from = o.checkpoint;
  o.checkpoint = (dir / "b.safetensors").string();
  o.stop_after_steps = 0;
  o.stop_after_epochs = 1;
  {
    auto l = train_batches(dir);
    Trainer t(test::small_mlp(), o);
    train::FitResult r = t.fit(*l);
    CHECK(r.steps == 10);
    CHECK(r.epochs.size() == 1);
    CHECK(r.epochs_done == 1);
    parts.insert(parts.end(), r.step_losses.begin(), r.step_losses.end());
  }
  CHECK(nn::load_safetensors(o.checkpoint).metadata.at("kiln.step") == "10");
  o.resume_from.clear();  // resume (the default) continues b itself
  o.stop_after_epochs = 0;
  {
    auto l = train_batches(dir);
    Trainer t(test::small_mlp(), o);
    train::FitResult r = t.fit(*l);
    CHECK(r.steps == 30);
    parts.insert(parts.end(), r.step_losses.begin(), r.step_losses.end());
  }
  CHECK(parts == whole);
  CHECK(test::file_bytes(o.checkpoint) == test::file_bytes(dir / "whole.safetensors"));

  o.resume_from = (dir / "missing.safetensors").string();
  auto l = train_batches(dir);
  Trainer t(test::small_mlp(), o);
  const std::string want = "resume_from '" + o.resume_from + "' does not exist";
  CHECK_THROWS_WITH_AS(t.fit(*l), doctest::Contains(want.c_str()), kiln::Error);
}

TEST_CASE("f16 loss scaling reports its scale in StepMetrics") {
  fs::path dir = test::make_data_dir();
  data::DataLoader train_loader(test::synthetic_set(dir, true), {.batch_size = 64, .shuffle = true, .seed = 0});
  FitOptions o = test::quiet(1);
  o.precision = train::Precision::f16;
  Trainer trainer(test::small_mlp(), o);
  auto rec = std::make_shared<Recorder>();
  trainer.add_callback(rec);
  train::FitResult r = trainer.fit(train_loader);
  REQUIRE(rec->steps.size() == 10);
  // GradScaler starts at 2^16 and only halves (on an overflow, skipping the step) in 10 steps.
  for (const train::StepMetrics& s : rec->steps) {
    CHECK(s.loss_scale > 0);
    CHECK(s.loss_scale <= 65536);
    CHECK(std::log2(s.loss_scale) == std::floor(std::log2(s.loss_scale)));
  }
  CHECK((rec->steps.back().loss_scale == 65536) == (r.skipped_steps == 0));
}

TEST_CASE("cuda_graph: refused off CUDA and for what a replay cannot repeat; on a GPU it trains as eager steps do") {
  FitOptions o = test::quiet(1);
  o.cuda_graph = true;
  CHECK_THROWS_WITH_AS(Trainer(test::small_mlp(), o), doctest::Contains("cuda_graph: needs a CUDA device"),
                       kiln::Error);
  o.device = Device(DeviceType::CUDA, 0);  // checked before any CUDA work: runs without a GPU
  o.optimizer = train::Optimizer::adam;
  CHECK_THROWS_WITH_AS(Trainer(test::small_mlp(), o), doctest::Contains("use sgd"), kiln::Error);
  o.optimizer = train::Optimizer::sgd;
  o.schedule = train::Schedule::cosine;
  CHECK_THROWS_WITH_AS(Trainer(test::small_mlp(), o), doctest::Contains("Schedule::constant"), kiln::Error);
  o.schedule = train::Schedule::constant;
  o.grad_accum = 2;
  CHECK_THROWS_WITH_AS(Trainer(test::small_mlp(), o), doctest::Contains("grad_accum (2) must be 1"), kiln::Error);
  o.grad_accum = 1;

  if (device_count(DeviceType::CUDA) == 0) {
    MESSAGE("skipped: the cuda_graph run itself needs a CUDA device (none here)");
    return;
  }
  fs::path dir = test::make_data_dir();
  auto run = [&](bool graph) {
    auto l = train_batches(dir);
    FitOptions g = o;
    g.cuda_graph = graph;
    Trainer t(test::small_mlp(), g);
    train::FitResult r = t.fit(*l);
    return std::pair{r, t.last_loss()};
  };
  auto [eager, eager_last] = run(false);
  auto [graphed, graphed_last] = run(true);
  CHECK(graphed.graph_replays == 10 - train::GraphedStep::kWarmupSteps);
  CHECK(graphed.step_losses.empty());  // the losses stay on the device
  CHECK(graphed_last == doctest::Approx(eager_last).epsilon(1e-4));
  CHECK(graphed.epochs[0].train_loss == doctest::Approx(eager.epochs[0].train_loss).epsilon(1e-4));
}
