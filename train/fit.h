// train::Trainer: the training loop as a library, for any nn::Module and any data::DataLoader,
// configured by typed options (enums and structs), with the parallel strategy as a value and
// callbacks for what users add around the loop (train/callbacks.h):
//
//   nn::ModulePtr<> model = nn::Sequential{nn::Flatten(), nn::Linear(784, 10)};
//   data::DataLoader train_loader(train_set, {.batch_size = 64, .shuffle = true});
//   train::Trainer trainer(model, {.epochs = 3, .lr = 0.05, .checkpoint = "run.safetensors"});
//   trainer.add_callback(std::make_shared<train::EarlyStopping>());
//   train::FitResult r = trainer.fit(train_loader, &val_loader);
//
// Promises: the same seed gives bit-identical losses on CPU; a run stopped after any optimizer
// step (or at an epoch end) and resumed from its checkpoint continues exactly (weights, optimizer
// and loss-scaler state, schedule position, data order, generator, callbacks' state); under
// DataParallel every rank takes the same decisions (metrics are all-reduced before callbacks see
// them) and ends with the weights one process would have on the concatenated batches.
#pragma once

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/device.h"
#include "data/dataloader.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace kiln::dist {
class ProcessGroup;
}
namespace kiln::amp {
class GradScaler;
}

namespace kiln::train {

class Callback;

enum class Optimizer { sgd, adam, adamw };
/// constant: `lr` throughout (callbacks such as ReduceLROnPlateau may change it); cosine: from
/// `lr` down to 0 over the whole run, per optimizer step; warmup_cosine: linear warm-up over
/// FitOptions::warmup_steps, then a cosine from `lr` down to FitOptions::min_lr at the run's last
/// step (train/fit_parts.h has the closed form).
enum class Schedule { constant, cosine, warmup_cosine };
/// f16 adds dynamic loss scaling (amp::GradScaler); bf16 needs none (train/mixed_precision.h).
enum class Precision { f32, f16, bf16 };

/// Everything in one process, on `FitOptions::device`.
struct SingleProcess {};
/// DistributedDataParallel over the ranks of the job (//distributed/launch, srun or mpirun set
/// the environment): each rank trains on its DistributedSampler share of the training loader's
/// data set with the loader's batch size per rank, gradients all-reduced during backward; rank 0
/// logs and writes checkpoints. zero_stage 1 shards the optimizer state (ZeRO-1).
struct DataParallel {
  int zero_stage = 0;
  /// Rendezvous and collective timeout, seconds.
  double timeout_s = 300;
  /// The group to train over; null: init_process_group() from the environment (Gloo on CPU,
  /// NCCL on CUDA).
  std::shared_ptr<dist::ProcessGroup> group;
};
using Strategy = std::variant<SingleProcess, DataParallel>;

/// The loss of a batch from the model's output and the batch's target (mean over the batch).
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

struct FitOptions {
  /// Epochs over the training loader; max_steps > 0 also stops after that many optimizer steps.
  int64_t epochs = 1;
  int64_t max_steps = 0;
  Optimizer optimizer = Optimizer::sgd;
  double lr = 0.01;
  /// SGD's momentum; weight decay (unset: 0, or 0.01 for AdamW).
  double momentum = 0.9;
  std::optional<double> weight_decay;
  Schedule schedule = Schedule::constant;
  Precision precision = Precision::f32;
  /// With f16/bf16: the model itself in 16 bits and f32 master weights in the optimizer ("O2");
  /// false: the f32 model under autocast ("O1").
  bool master_weights = false;
  /// Micro-batches (loader batches) per optimizer step; their losses are averaged.
  int64_t grad_accum = 1;
  /// Clip the global L2 norm of the gradient to this before each step (0: off).
  double clip_grad_norm = 0;
  LossFn loss;  // empty: cross-entropy over class logits
  /// A progress line every log_every optimizer steps (0: none) and a line per epoch, to `log`
  /// (rank 0; null: silent).
  int64_t log_every = 100;
  std::ostream* log = &std::cout;
  /// The checkpoint file ("": none), written at every epoch end, every save_every optimizer
  /// steps (0: only at epoch ends) and when a run stops early. With `resume`, an existing file
  /// is loaded first and training continues where it stopped.
  std::string checkpoint;
  int64_t save_every = 0;
  bool resume = true;
  /// Compute threads (0: leave the setting alone).
  int threads = 0;
  /// Under DataParallel on CUDA each rank takes cuda:LOCAL_RANK instead.
  Device device = kCPU;
  Strategy strategy = SingleProcess{};

  /// Schedule::warmup_cosine: lr * (step + 1) / warmup_steps for the first warmup_steps steps,
  /// then the cosine down to min_lr.
  int64_t warmup_steps = 0;
  double min_lr = 0;
  /// Adam and AdamW's betas.
  double beta1 = 0.9, beta2 = 0.999;
  /// When set, the parameters it returns false for (given their names in model().named_parameters())
  /// form a second parameter group with weight decay 0, as GPT-2 is trained (no decay on biases,
  /// LayerNorms and embeddings: train::gpt::weight_decayed). Empty: one group, all decayed.
  std::function<bool(const std::string& name, const Tensor& param)> decay;
  /// f16: the dynamic loss scale to start from.
  double loss_scale = 65536;
  /// Resume from this checkpoint (it must exist) instead of from `checkpoint`, which new
  /// checkpoints still go to; "": `resume` decides.
  std::string resume_from;
};

/// Loss and accuracy over a loader (accuracy: the argmax of 2-D outputs against integer
/// targets; absent for other outputs).
struct EvalMetrics {
  double loss = 0;
  std::optional<double> accuracy;
  int64_t samples = 0;
};

/// What callbacks see at the end of an epoch (all-reduced under DataParallel).
struct EpochMetrics {
  int64_t epoch = 0;  // 0-based
  double train_loss = 0;  // mean of the epoch's step losses
  std::optional<double> val_loss, val_accuracy;  // when a validation loader was given
  double lr = 0;  // the optimizer's lr at the end of the epoch
  double seconds = 0;  // the epoch's training time (validation excluded)
};

/// After each optimizer step.
struct StepMetrics {
  int64_t step = 0;  // global optimizer steps done, this one included
  int64_t epoch = 0;
  double loss = 0;  // this rank's loss of the step (mean over its micro-batches)
  double lr = 0;
  double grad_norm = -1;  // before clipping; -1 when not clipping
};

struct FitResult {
  std::vector<EpochMetrics> epochs;  // the epochs completed by this call
  std::vector<double> step_losses;   // every step's loss of this call, in order (this rank's)
  /// The last epoch end's validation (none when no epoch ended in this call).
  std::optional<double> val_loss, val_accuracy;
  int64_t steps = 0;  // global optimizer steps reached
  int64_t epochs_done = 0;  // global epochs completed
  int64_t skipped_steps = 0;  // f16: steps skipped by the loss scaler on inf/NaN
  bool stopped_early = false;  // a callback stopped the run before its planned steps (epochs, max_steps)
  double samples_per_sec = 0;  // all ranks' training samples per second of training time
  double seconds = 0;  // wall time of fit()
  int64_t checkpoints = 0;  // checkpoints written
  int rank = 0, world_size = 1;
  double checkpoint_seconds = 0;  // wall time spent writing them (waits for other ranks included)
};

class Trainer {
 public:
  /// Moves the model to the device (and to 16 bits with master_weights), joins the process
  /// group and wraps the model under DataParallel, and builds the optimizer. Throws kiln::Error
  /// naming the option on a bad value.
  Trainer(nn::ModulePtr<> model, FitOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  /// Called in the order added.
  void add_callback(std::shared_ptr<Callback> callback);

  /// Trains on `train` (under DataParallel: a rank's share of its data set, same batch size,
  /// shuffle and seed), validating on `val` after every epoch when given.
  FitResult fit(data::DataLoader& train, data::DataLoader* val = nullptr);
  /// Mean loss and accuracy over `loader`, in eval mode without recording (under DataParallel
  /// each rank takes a contiguous slice of the loader's order, or the loader as it is when it has
  /// a data::DistributedSampler, and the sums are all-reduced). Callbacks are not told (fit's
  /// validation tells them). A collective under DataParallel.
  EvalMetrics evaluate(data::DataLoader& loader);

  /// Ends fit() after the current step (from on_step_end) or epoch (from on_epoch_end); the
  /// checkpoint, when set, is written first.
  void request_stop() { stop_requested_ = true; }
  bool stop_requested() const { return stop_requested_; }

  /// The user's model (not the data-parallel wrapper).
  nn::Module& model() { return *model_; }
  /// The optimizer (ZeRO-1's sharded one under zero_stage 1).
  optim::Optimizer& optimizer() { return *opt_; }
  const FitOptions& options() const { return options_; }
  int rank() const;
  int world_size() const;
  /// The global optimizer step and the epoch in progress.
  int64_t step() const;
  int64_t epoch() const;
  /// The process group under DataParallel (null otherwise).
  dist::ProcessGroup* process_group() const;
  /// The loss scaler of Precision::f16 (disabled otherwise): its scale and skipped steps.
  amp::GradScaler& loss_scaler();

  /// The state behind the Trainer (train/fit_impl.h; not part of the API).
  struct Impl;

 private:
  nn::ModulePtr<> model_;
  FitOptions options_;
  std::unique_ptr<optim::Optimizer> opt_;
  std::unique_ptr<Impl> impl_;
  std::vector<std::shared_ptr<Callback>> callbacks_;
  bool stop_requested_ = false;
};

}  // namespace kiln::train
