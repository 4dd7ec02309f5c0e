// The Trainer's Pipeline strategy (train/fit.h): the Sequential cut into stages over the ranks
// (dist::Pipeline), its own loop of pipeline steps with the Trainer's options, callbacks, progress
// lines and one checkpoint file per stage, and evaluation through the stages. The metrics come
// from the last stage to every rank, so all ranks' callbacks decide alike. Not a public header:
// Trainer's constructor, fit() and evaluate() hand over to it.
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

  FitResult fit(Trainer& t, const std::vector<std::shared_ptr<Callback>>& callbacks, data::DataLoader& train,
                data::DataLoader* val);
  EvalMetrics evaluate(Trainer& t, data::DataLoader& loader);

 private:
  /// True when every stage's file of `path` exists (a partial set throws, naming the missing one).
  bool stage_files_exist(const std::string& path) const;
  void save(Trainer& t, const std::vector<std::shared_ptr<Callback>>& callbacks, int64_t epoch, int64_t batch);
  void load(Trainer& t, const std::vector<std::shared_ptr<Callback>>& callbacks);

  Trainer::Impl& m_;
  std::unique_ptr<dist::Pipeline> pipe_;
  nn::ModulePtr<> stage_;  // pipe_'s stage module, not owned
  std::shared_ptr<dist::ProcessGroup> data_;  // hybrid: the ranks holding this stage
  int replica_ = 0, replicas_ = 1;
};

}  // namespace kiln::train
