// The Trainer's state behind train/fit.h, shared by its two source files: fit.cc (set-up, the
// strategy, evaluation, checkpoints) and fit_loop.cc (the loop of fit()). Not a public header.
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "distributed/data_parallel/ddp.h"
#include "distributed/data_parallel/zero.h"
#include "distributed/launch/heartbeat.h"
#include "train/checkpoint.h"
#include "train/fit.h"
#include "train/graph_step.h"
#include "train/mixed_precision.h"

namespace kiln::train {

class PipelineRun;

struct Trainer::Impl {
  explicit Impl(const FitOptions& o);

  MixedPrecision mp;
  std::shared_ptr<dist::ProcessGroup> pg;  // DataParallel
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  dist::ZeroRedundancyOptimizer* zero = nullptr;  // the Trainer's optimizer under zero_stage 1
  TrainingState state;  // the position: global step, epoch in progress, batches done in it
  bool resumed = false;
  std::unique_ptr<PipelineRun> pipeline;  // under Pipeline: the stages and their loop (fit_pipeline.h)
  int rank = 0, world = 1;
  int64_t checkpoints = 0;
  double checkpoint_seconds = 0;
  std::unique_ptr<GraphedStep> graphed;  // cuda_graph
  double last_loss = 0;  // the last eager step's
  dist::Heartbeat heartbeat;  // for the launcher's --watchdog-timeout (a no-op without it)
  std::ostream quiet{nullptr};

  /// Rank 0's log (the options' stream, or nothing).
  std::ostream& out(const FitOptions& o) { return rank == 0 && o.log != nullptr ? *o.log : quiet; }
  /// Where the process group's collectives take their tensors: the device under NCCL, else the CPU.
  Device comm_device(const FitOptions& o) const { return pg && pg->backend() == "nccl" ? o.device : kCPU; }
};

/// The device of a rank of a multi-process job: on GPUs cuda:LOCAL_RANK (one per rank of the node).
Device rank_device(Device d);

/// The options' loss, or cross-entropy.
Tensor fit_loss(const FitOptions& o, const Tensor& output, const Tensor& target);
/// The loss summed over the batch's rows (evaluation): cross-entropy's own sum, or the options'
/// mean loss times the rows.
double fit_loss_sum(const FitOptions& o, const Tensor& output, const Tensor& target);

/// Writes the Trainer's checkpoint at (epoch, batch) with its callbacks' state; loads it back.
void save_fit_checkpoint(Trainer& t, Trainer::Impl& m, const std::vector<std::shared_ptr<Callback>>& callbacks,
                         int64_t epoch, int64_t batch);
void load_fit_checkpoint(Trainer& t, Trainer::Impl& m, const std::vector<std::shared_ptr<Callback>>& callbacks,
                         const std::string& path);

/// Why `o` cannot train with cuda_graph ("" when it can, or when cuda_graph is off).
std::string cuda_graph_problem(const FitOptions& o);

/// Under DataParallel: this rank's share of `loader`'s data set (a DistributedSampler with the
/// loader's shuffle, seed and drop_last), or null when `loader` already samples for this rank.
std::unique_ptr<data::DataLoader> shard_loader(data::DataLoader& loader, int rank, int world);

/// Evaluation's share of `loader` for part `part` of `parts` (a rank, or a pipeline's replica): a
/// contiguous slice of its epoch-0 order; null when the loader already holds the share (a
/// DistributedSampler) or there is one part.
std::unique_ptr<data::DataLoader> eval_slice(data::DataLoader& loader, int part, int parts);

/// What evaluation sums over batches: the loss (summed over rows), the correct argmax rows, the
/// rows, and the batches without an accuracy (not 2-D class scores against integer labels).
struct EvalSums {
  double loss = 0, correct = 0, samples = 0, unscored = 0;
  void add(const FitOptions& o, const Tensor& output, const Tensor& target);
  std::vector<double> values() const { return {loss, correct, samples, unscored}; }
  /// The metrics of summed `values()` (those of all ranks, where they were reduced).
  static EvalMetrics metrics(const std::vector<double>& v);
};

}  // namespace kiln::train
