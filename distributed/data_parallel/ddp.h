// DistributedDataParallel: the same model on every rank, each on its own share of the data;
// gradients are averaged across ranks during backward, so after `backward()` returns every
// rank holds the gradient of the mean loss over the concatenated batch, and the optimizer steps
// identically everywhere.
//
//   auto pg = dist::init_process_group();                 // env:// (set by //distributed/launch)
//   dist::DistributedDataParallel ddp(model, pg);          // checks models agree, syncs rank 0's
//   Tensor loss = nn::functional::cross_entropy(ddp(x), y);
//   loss.backward();                                       // buckets all-reduce while it runs
//   optimizer.step();
//
// The wrapper is a Module, usable wherever the model is (an `nn::Module&` training loop need
// not know whether data parallel is on), but unlike PyTorch's it adds no "module." prefix: it
// holds the model's own parameters, buffers and children under the model's names, so its
// state_dict() is the model's and checkpoints have the same keys with and without it.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/backend/process_group.h"
#include "distributed/data_parallel/reducer.h"
#include "nn/module.h"

namespace kiln::dist {

struct DDPOptions {
  double first_bucket_mb = 1;
  double bucket_cap_mb = 25;
  /// Allow parameters that get no gradient in some step (reduced as zeros); off, such a
  /// parameter is an error that names it.
  bool find_unused_parameters = false;
  /// Broadcast rank 0's buffers (e.g. batch-norm running statistics) before every forward.
  bool broadcast_buffers = true;
  /// false: a single all-reduce of all gradients after backward (no overlap), for comparison.
  bool overlap = true;
  /// Each parameter's .grad is a view into its bucket (c10d's gradient_as_bucket_view): the
  /// averaged gradient is not copied back after the all-reduce, and with zero_grad(false) backward
  /// accumulates straight into the bucket (no copy in either direction). false: .grad is a
  /// separate tensor, written back from the bucket after every synchronised backward.
  bool gradient_as_bucket_view = true;
};

/// The bucket sizes and flags of `options` in the reducers' terms.
ReducerOptions reducer_options(const DDPOptions& options);

class DistributedDataParallel : public nn::Module {
 public:
  /// Checks that every rank holds the same parameter and buffer names, shapes and dtypes (an
  /// error naming the first difference otherwise, on every rank), then copies rank 0's values
  /// to all ranks.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> pg,
                          DDPOptions options = {});

  /// Runs the module; when grad mode is on and not inside no_sync(), the next backward
  /// all-reduces the gradients.
  Tensor forward(const Tensor& input) override;
  /// Sets the model's mode (its own train() override included).
  void train(bool on = true) override;
  /// The model's description: the wrapper is transparent.
  std::string repr(int indent = 0) const override { return module_->repr(indent); }
  // The reducer's hooks and no_sync guards refer to this object: it stays where it was built.
  DistributedDataParallel(DistributedDataParallel&&) = delete;

  /// While the guard lives, backward passes only accumulate into `.grad` locally (gradient
  /// accumulation); the first synchronised backward after it reduces the accumulated sum.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp) : ddp_(ddp), prev_(ddp.sync_) { ddp_.sync_ = false; }
    ~NoSyncGuard() { ddp_.sync_ = prev_; }
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool prev_;
  };
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  /// Arms the next backward to all-reduce, as a synchronised forward does: for callers that run
  /// several forwards (under no_sync) before their backwards, such as pipeline schedules.
  void prepare_for_backward() { reducer().prepare_for_backward(); }

  /// Replaces the all-reducing gradient reducer (ZeroRedundancyOptimizer installs its
  /// reduce-scattering one here); the old reducer's hooks go quiet once it is released.
  /// DDP's own reducer is built (its buckets allocated) on first use, so one replaced before
  /// the first forward never holds memory.
  void set_gradient_reducer(std::shared_ptr<GradientReducer> reducer);
  /// The parameters that get gradients, with their names, in registration order (what the
  /// reducer buckets).
  const std::vector<std::pair<std::string, Tensor>>& trained_parameters() const { return trained_; }

  nn::Module& module() { return *module_; }
  ProcessGroup& process_group() { return *pg_; }
  const std::shared_ptr<ProcessGroup>& shared_process_group() const { return pg_; }
  const DDPOptions& options() const { return options_; }
  /// Communication timings of the last synchronised backward.
  const ReducerStats& stats() const { return reducer().stats(); }
  /// Parameter names per gradient bucket, in the order their all-reduces are launched.
  std::vector<std::vector<std::string>> bucket_names() const { return reducer().bucket_names(); }

 private:
  /// The gradient reducer; builds DDP's all-reducing one when none is set yet.
  GradientReducer& reducer() const;
  void adopt_model_entries();
  void check_same_model();
  void broadcast_state(bool buffers_only);

  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> pg_;
  DDPOptions options_;
  std::vector<std::pair<std::string, Tensor>> trained_;
  mutable std::shared_ptr<GradientReducer> reducer_;  // built lazily: see set_gradient_reducer
  bool sync_ = true;
  bool sync_buffers_ = false;  // broadcast rank 0's buffers before each forward (there are some)
};

}  // namespace kiln::dist
