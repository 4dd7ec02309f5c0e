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
#include "core/tensor.h"
#include "data/dataloader.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "train/mixed_precision.h"

namespace kiln::dist {
class DistributedDataParallel;
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
/// How ZeRO-1 writes its checkpoint: one ordinary file (any run resumes it), or each rank its part
/// of the optimizer state beside it (resumed only at the same world size; train/zero_checkpoint.h).
enum class ZeroCheckpoint { consolidated, sharded };

/// Everything in one process, on `FitOptions::device`.
struct SingleProcess {};
/// DistributedDataParallel over the ranks of the job (//distributed/launch, srun or mpirun set
/// the environment): each rank trains on its DistributedSampler share of the training loader's
/// data set with the loader's batch size per rank, gradients all-reduced during backward; rank 0
/// logs and writes checkpoints. zero_stage 1 shards the optimizer state (ZeRO-1).
struct DataParallel {
  int zero_stage = 0;
  ZeroCheckpoint zero_checkpoint = ZeroCheckpoint::consolidated;
  /// Rendezvous and collective timeout, seconds.
  double timeout_s = 300;
  /// The group to train over; null: init_process_group() from the environment (Gloo on CPU,
  /// NCCL on CUDA).
  std::shared_ptr<dist::ProcessGroup> group;
};
/// How Pipeline's micro-batches flow (dist::Schedule): all forwards then all backwards; one
/// forward one backward (at most `stages` micro-batches' activations live); 1F1B over
/// `virtual_stages` model chunks per rank (a smaller bubble; micro_batches a multiple of stages).
enum class PipelineSchedule { gpipe, one_f_one_b, interleaved };
/// Where Pipeline cuts the model: equal parameter counts, or equal forward time measured on
/// `Pipeline::sample` (rank 0 times each layer, every rank gets the same cut).
enum class PipelineBalance { params, time };
/// Pipeline parallel (train/fit_pipeline.h, docs/pipeline.md) for an nn::Sequential: the layers
/// cut into `stages` consecutive stages, one per rank of the job; each loader batch is split into
/// `micro_batches` that flow through the stages (dist::Pipeline). Every rank of a pipeline reads
/// the same batches (stage 0 uses the inputs, the last stage the targets and computes the loss);
/// the loss and the validation metrics come from the last stage to every rank, so rank 0 logs
/// them and all callbacks see the same numbers. Checkpoints: one file per stage
/// ("run.stage1-of-2.safetensors", dist::save_stage_checkpoint), resumed exactly.
struct Pipeline {
  int stages = 2;
  /// Micro-batches per loader batch: the batch size (and the epoch's last batch) must divide by it.
  int micro_batches = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  /// Model chunks per rank (interleaved only, which needs at least 2).
  int virtual_stages = 1;
  PipelineBalance balance = PipelineBalance::params;
  /// balance time: one micro-batch of inputs to time the layers on (read on rank 0).
  Tensor sample;
  /// Hybrid pipeline x data parallel: the world is `stages` x replicas (rank = replica * stages +
  /// stage); each replica trains on its DistributedSampler share of the data set, and each
  /// stage's gradients are averaged over its replicas (DDP). false: the world must equal `stages`.
  bool data_parallel = false;
  /// Rendezvous and collective timeout, seconds.
  double timeout_s = 300;
  /// The world group (with data_parallel: the default group or its dist::trace_process_group
  /// wrapper, since the stages' and replicas' subgroups are made from it); null:
  /// init_process_group() from the environment (Gloo on CPU, NCCL on CUDA).
  std::shared_ptr<dist::ProcessGroup> group;
};
/// Model parallel in one process (train/model_parallel.h) for an nn::Sequential: consecutive
/// parts of its layers on `devices` (at least 2), the activation moved between them with
/// to(device) so autograd carries its gradient back. `boundaries`: devices.size() + 1 layer
/// indices from 0 to the layer count (part k runs layers [b[k], b[k+1])); empty: equal parameter
/// counts. Batches go to the last device, where the output and the loss are (FitOptions::device
/// is ignored); model() is the model with its parts placed (the same layers and names).
struct ModelParallel {
  std::vector<Device> devices;
  std::vector<int> boundaries;
};
using Strategy = std::variant<SingleProcess, DataParallel, Pipeline, ModelParallel>;

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
  /// The "epoch E/N done: ..." line after each epoch (off: a callback prints its own).
  bool epoch_lines = true;
  /// The checkpoint file ("": none), written at every epoch end, every save_every optimizer
  /// steps (0: only at epoch ends) and when a run stops early. With `resume`, an existing file
  /// is loaded first and training continues where it stopped.
  std::string checkpoint;
  int64_t save_every = 0;
  bool resume = true;
  /// Load this checkpoint instead (it must exist) when fit() starts; the run still writes to
  /// `checkpoint`.
  std::string resume_from;
  /// Stop after this many optimizer steps / completed epochs of this fit() call (0: never),
  /// writing the checkpoint first; the schedule still spans `epochs`, so a resumed run continues
  /// the same run (time-sliced jobs, tests).
  int64_t stop_after_steps = 0;
  int64_t stop_after_epochs = 0;
  /// SIGTERM/SIGINT during fit(): every rank finishes the step it is in (the ranks agree through
  /// an all-reduced flag), the checkpoint is written and fit() returns with FitResult::preempted
  /// (a second signal exits at once; dist::kExitPreempted is the exit status to use).
  bool handle_preemption = false;
  /// CUDA only: the whole step captured once as a CUDA graph after a few eager steps and replayed
  /// for every full batch (train/graph_step.h). Needs SGD, Schedule::constant, no f16 loss
  /// scaling, SingleProcess, grad_accum 1 and no clipping. Replayed steps do not call the
  /// forward/backward callbacks, and their loss stays on the device (StepMetrics::loss is NaN;
  /// Trainer::last_loss() reads it).
  bool cuda_graph = false;
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
  double loss_scale = 1;  // f16: the loss scaler's scale after the step (1 without one)
  int64_t samples = 0;    // samples of the step, all ranks together
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
  bool preempted = false;  // handle_preemption: a signal stopped the run (after writing the checkpoint)
  int64_t graph_replays = 0;  // cuda_graph: steps run by replaying the captured graph
  double samples_per_sec = 0;  // all ranks' training samples per second of training time
  double seconds = 0;  // wall time of fit()
  int64_t checkpoints = 0;  // checkpoints written
  double checkpoint_seconds = 0;  // wall time spent writing them (waits for the other ranks included)
  int rank = 0, world_size = 1;
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

  /// The user's model (not the data-parallel wrapper); under Pipeline this rank's stage (its
  /// layers, named "0", "1", ... in stage order), under ModelParallel the placed Sequential.
  nn::Module& model() { return *model_; }
  /// The optimizer (ZeRO-1's sharded one under zero_stage 1).
  optim::Optimizer& optimizer() { return *opt_; }
  const FitOptions& options() const { return options_; }
  int rank() const;
  int world_size() const;
  /// The global optimizer step and the epoch in progress.
  int64_t step() const;
  int64_t epoch() const;
  /// The process group under DataParallel and Pipeline (the world group; null otherwise), and the
  /// data-parallel wrapper under DataParallel.
  dist::ProcessGroup* process_group() const;
  dist::DistributedDataParallel* ddp() const;
  /// The loss of the last step (a device read under cuda_graph: call it only when needed).
  double last_loss() const;
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
