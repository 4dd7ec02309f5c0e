// The optimizer, data sets and per-rank device of the main job (see train_parts.h).
#include "train/train_parts.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "models/build_model.h"
#include "nn/functional.h"
#include "optim/adam.h"
#include "optim/sgd.h"

namespace kiln::train {

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, const std::vector<Tensor>& params) {
  return make_optimizer(c, std::vector<optim::ParamGroup>{optim::ParamGroup(params)});
}

std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<optim::ParamGroup> groups) {
  switch (c.optimizer) {
    case Optimizer::sgd:
      return std::make_unique<optim::SGD>(std::move(groups), optim::SGDOptions(c.lr).set_momentum(0.9));
    case Optimizer::adam: return std::make_unique<optim::Adam>(std::move(groups), optim::AdamOptions(c.lr));
    case Optimizer::adamw:
      return std::make_unique<optim::AdamW>(std::move(groups), optim::AdamOptions(c.lr).set_weight_decay(0.01));
  }
  fail("make_optimizer: unknown optimizer {}", static_cast<int>(c.optimizer));
}

namespace {

/// `ds` with its images padded to `side` x `side` by borders of black pixels (the normalised value
/// of 0, so the border looks like the images' own background); `ds` itself when it has that size.
std::shared_ptr<data::TensorDataset> pad_images(std::shared_ptr<data::TensorDataset> ds, int64_t side) {
  const int64_t h = ds->data().size(2), w = ds->data().size(3);
  if (h == side && w == side) return ds;
  KILN_CHECK(h <= side && w <= side && (side - h) % 2 == 0 && (side - w) % 2 == 0,
             "mnist: {}x{} images do not pad evenly to the model's {}x{}", h, w, side, side);
  const double black = (0.0 - data::kFashionMnistNormalization.mean) / data::kFashionMnistNormalization.std;
  const int64_t ph = (side - h) / 2, pw = (side - w) / 2;
  Tensor padded = nn::functional::pad(ds->data(), {pw, pw, ph, ph}, PadMode::constant, black);
  return std::make_shared<data::TensorDataset>(padded, ds->targets());
}

}  // namespace

Datasets load_datasets(const TrainConfig& c) {
  KILN_CHECK(std::filesystem::is_directory(c.data_dir), "mnist: data directory '{}' does not exist (use --data-dir)",
             c.data_dir);
  auto full_train = std::make_shared<data::MnistDataset>(c.data_dir, /*train=*/true, data::kFashionMnistNormalization);
  std::shared_ptr<data::TensorDataset> train = full_train;
  if (c.limit_train > 0 && c.limit_train < full_train->size())
    train = std::make_shared<data::TensorDataset>(full_train->data().narrow(0, 0, c.limit_train),
                                                  full_train->targets().narrow(0, 0, c.limit_train));
  const int64_t side = models::input_size(c.model);
  auto test = std::make_shared<data::MnistDataset>(c.data_dir, /*train=*/false, data::kFashionMnistNormalization);
  return {pad_images(train, side), pad_images(test, side)};
}

Device rank_device(const TrainConfig& c, const char* what) {
  if (!c.device.is_cuda()) return c.device;
  const char* local = std::getenv("LOCAL_RANK");
  Device d(DeviceType::CUDA, local ? std::atoi(local) : 0);
  KILN_CHECK(d.index < device_count(DeviceType::CUDA),
             "{}: LOCAL_RANK {} has no GPU of its own ({} CUDA devices here); start at most that many ranks per node",
             what, d.index, device_count(DeviceType::CUDA));
  return d;
}

StepCheckpoints::Action StepCheckpoints::after_step(int64_t global_step, int64_t run_steps) {
  Action a;
  heartbeat_.beat(global_step);
  preempted_ = guard_.should_stop(pg_, comm_);
  a.stop = preempted_ || (config_.stop_after_steps > 0 && run_steps >= config_.stop_after_steps);
  a.save = !config_.save.empty() && (a.stop || (config_.save_every > 0 && global_step % config_.save_every == 0));
  return a;
}

EpochProgress::EpochProgress(int64_t epoch, int64_t steps_per_epoch, int64_t log_every, std::ostream& out)
    : epoch_(epoch), steps_per_epoch_(steps_per_epoch), log_every_(log_every), out_(out) {}

void EpochProgress::step(int64_t samples, double loss, const std::function<double(double)>& shown_loss) {
  loss_sum_ += loss;
  step_unread(samples, [&] { return shown_loss ? shown_loss(loss) : loss; });
}

void EpochProgress::step_unread(int64_t samples, const std::function<double()>& read_loss) {
  ++steps_;
  samples_ += samples;
  window_samples_ += samples;
  if (steps_ % log_every_ != 0) return;
  const double shown = read_loss();
  const double window = std::chrono::duration<double>(Clock::now() - window_start_).count();
  out_ << fmt::format("epoch {} step {}/{} loss {:.4f} {:.0f} samples/s\n", epoch_ + 1, steps_, steps_per_epoch_, shown,
                      window_samples_ / window)
       << std::flush;  // a long job's log is read while it runs (and redirected to a file, cout is block-buffered)
  window_start_ = Clock::now();
  window_samples_ = 0;
}

double EpochProgress::finish() {
  seconds_ = std::chrono::duration<double>(Clock::now() - start_).count();
  return seconds_;
}

void EpochProgress::done(double train_loss, double test_loss, double test_accuracy) const {
  out_ << fmt::format("epoch {} done: train_loss {:.4f} test_loss {:.4f} test_accuracy {:.4f} ({:.0f} samples/s)\n",
                      epoch_ + 1, train_loss, test_loss, test_accuracy, samples_ / seconds_);
}

}  // namespace kiln::train
