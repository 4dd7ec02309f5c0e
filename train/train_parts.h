// Pieces of the main job (train/trainer.cc, through the Trainer: one process or data parallel;
// train/pipeline_trainer.cc, its own loop: pipeline stages): the data sets and the device of a
// rank; and, for the pipeline loop only, the optimizer, the step checkpoints/preemption and the
// per-epoch progress lines (the Trainer has these as options and train/epoch_log.h).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <ostream>
#include <vector>

#include "data/dataset.h"
#include "data/mnist.h"
#include "distributed/launch/heartbeat.h"
#include "distributed/launch/preemption.h"
#include "train/trainer.h"
#include "optim/optimizer.h"

namespace kiln::train {

/// SGD with momentum 0.9, Adam, or AdamW with weight decay 0.01, at config.lr.
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, const std::vector<Tensor>& params);
/// The same optimizer over given groups (what ZeRO wraps around its shards).
std::unique_ptr<optim::Optimizer> make_optimizer(const TrainConfig& c, std::vector<optim::ParamGroup> groups);

struct Datasets {
  std::shared_ptr<data::Dataset> train;  // the first limit_train images when set
  std::shared_ptr<data::TensorDataset> test;
};
/// Reads Fashion-MNIST (or MNIST) from config.data_dir; throws naming a missing directory. For a
/// model that takes 32x32 images (resnet18) both sets are padded with black borders of 2 pixels,
/// as torchvision's transforms.Pad(2) before Normalize.
Datasets load_datasets(const TrainConfig& c);

/// The device of this rank in a multi-process job: on GPUs one per rank of this node
/// (LOCAL_RANK, as torchrun users expect); `what` names the flag in the error when there are
/// fewer GPUs than ranks. Elsewhere config.device itself.
Device rank_device(const TrainConfig& c, const char* what);

/// When a training loop saves mid-epoch and when it stops early: every `--save-every` steps, after
/// `--stop-after-steps` steps of this invocation, and on SIGTERM/SIGINT (installed for its
/// lifetime). Under a process group every rank must call after_step() after the same step: the
/// stop decision is agreed there, so all ranks save and stop together. Each step also beats the
/// heartbeat the launcher's watchdog reads.
class StepCheckpoints {
 public:
  StepCheckpoints(const TrainConfig& c, dist::ProcessGroup* pg)
      : config_(c), pg_(pg), comm_(pg && pg->backend() == "nccl" ? c.device : kCPU) {}
  struct Action {
    bool save = false;  // write a checkpoint now
    bool stop = false;  // then leave the loop (preempted() says whether a signal asked)
  };
  /// After a step: `global_step` counts every step of the run, `run_steps` those of this invocation.
  Action after_step(int64_t global_step, int64_t run_steps);
  bool preempted() const { return preempted_; }

 private:
  const TrainConfig& config_;
  dist::ProcessGroup* pg_;
  Device comm_;  // where the group's collectives take their tensors
  dist::PreemptionGuard guard_;
  dist::Heartbeat heartbeat_;  // for the launcher's --watchdog-timeout
  bool preempted_ = false;
};

/// One epoch's counters and progress lines: "epoch E step S/N loss L X samples/s" every
/// `log_every` steps, and "epoch E done: ..." at the end.
class EpochProgress {
 public:
  EpochProgress(int64_t epoch, int64_t steps_per_epoch, int64_t log_every, std::ostream& out);
  /// One step over `samples` images (all ranks together) with mean loss `loss`; `shown_loss` gives
  /// the loss to print and is called only when a line is due (it may communicate).
  void step(int64_t samples, double loss, const std::function<double(double)>& shown_loss = nullptr);
  /// A step whose loss stays on the device (--cuda-graph): `read_loss` is called only when a line
  /// is due; the epoch's losses come in one sum through add_loss_sum().
  void step_unread(int64_t samples, const std::function<double()>& read_loss);
  void add_loss_sum(double sum) { loss_sum_ += sum; }
  /// The mean step loss on this rank so far.
  double mean_loss() const { return loss_sum_ / static_cast<double>(std::max<int64_t>(steps_, 1)); }
  /// Ends the epoch's training (before evaluation): returns its seconds, which done() reports.
  double finish();
  int64_t samples() const { return samples_; }
  /// The "epoch E done" line, with the samples per second of training.
  void done(double train_loss, double test_loss, double test_accuracy) const;

 private:
  using Clock = std::chrono::steady_clock;
  int64_t epoch_, steps_per_epoch_, log_every_;
  std::ostream& out_;
  Clock::time_point start_ = Clock::now(), window_start_ = start_;
  int64_t steps_ = 0, samples_ = 0, window_samples_ = 0;
  double loss_sum_ = 0, seconds_ = 0;
};

}  // namespace kiln::train
