// The Trainer's Pipeline strategy (train/fit.h): the Sequential cut into stages over the ranks
// (dist::Pipeline), the stages' parts of the Trainer's one loop (the step, its loss, clipping, one
// checkpoint file per stage) and evaluation through the stages. The metrics come from the last
// stage to every rank, so all ranks' callbacks decide alike. Not a public header: Trainer's
// constructor, fit() and evaluate() call it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/pipeline/pipeline.h"
#include "train/fit_impl.h"

namespace kiln::train {

class PipelineRun {
 public:
  /// Checks the strategy against the model and the job (a Sequential, enough layers, the world a
  /// multiple of the stages), joins the process group (setting m's rank, world and group), casts
  /// the model for mixed precision, cuts it (by parameters, or by time on Pipeline::sample) and
  /// keeps this rank's stage on its device. Logs the split on rank 0. `o.device` becomes the rank's.
  PipelineRun(const nn::ModulePtr<>& model, FitOptions& o, Trainer::Impl& m);

  /// This rank's layers (what the Trainer's model() and optimizer hold).
  nn::ModulePtr<> stage_module() const { return stage_; }
  dist::Pipeline& pipeline() { return *pipe_; }

  // The stages' parts of the Trainer's loop (train/fit_loop.cc).

  /// This replica's share of the training loader (null: the loader itself, one replica), after
  /// checking that its batches split into the micro-batches.
  std::unique_ptr<data::DataLoader> prepare_loader(const FitOptions& o, data::DataLoader& train);
  /// One loader batch through the stages (forward and backward interleaved by the schedule, the
  /// gradients divided by `group_n` and loss-scaled as the one-process loop does); its unscaled
  /// mean loss on the last stage, NaN on the others.
  double train_step(const FitOptions& o, const data::Example& batch, int64_t group_n);
  /// The last stage's step loss on every rank (averaged over the replicas).
  double step_loss(double mine);
  /// Clips the gradient's L2 norm over every stage; returns the norm before clipping.
  double clip_grad_norm(double max_norm);
  /// Data-parallel replicas of the pipeline (1 without Pipeline::data_parallel).
  int replicas() const { return replicas_; }

  /// True when every stage's file of `path` exists (a partial set throws, naming the missing one).
  bool stage_files_exist(const std::string& path) const;
  /// Writes this stage's file of the checkpoint at m's state (the first replica only); reads it
  /// back, refusing a set whose stages hold different steps.
  void write(optim::Optimizer& opt, const std::string& path);
  TrainingState read(const FitOptions& o, optim::Optimizer& opt, const std::string& path);
  EvalMetrics evaluate(Trainer& t, data::DataLoader& loader);

 private:
  Trainer::Impl& m_;
  std::unique_ptr<dist::Pipeline> pipe_;
  nn::ModulePtr<> stage_;  // pipe_'s stage module, not owned
  std::shared_ptr<dist::ProcessGroup> data_;  // hybrid: the ranks holding this stage
  int replica_ = 0, replicas_ = 1;
};

}  // namespace kiln::train
