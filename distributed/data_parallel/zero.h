// ZeRO stage 1 (DeepSpeed's, and PyTorch's ZeroRedundancyOptimizer with DDP's gradient
// reduce-scatter): each data-parallel rank keeps 1/N of the optimizer state. During backward the
// gradients are reduce-scattered bucket by bucket (overlapped as DDP's all-reduce is), each rank
// steps the shard of the parameters it owns with an ordinary optimizer (SGD, Adam, AdamW, ...),
// and the updated shards are all-gathered into every rank's parameters. The updates are
// elementwise, so training matches plain DDP with the same optimizer.
//
//   dist::DistributedDataParallel ddp(model, pg);
//   dist::ZeroRedundancyOptimizer opt(ddp, dist::optimizer_factory<optim::AdamW>(optim::AdamOptions(3e-4)));
//   ... loss.backward(); opt.clip_grad_norm_(1.0); opt.step(); opt.zero_grad();
//
// The optimizer is an optim::Optimizer over the shards (1-D tensors): LR schedulers and
// GradScaler take it as they take any other. The gradients live in the reducer's buckets (each
// parameter's .grad a view of its slot, as DDP's gradient_as_bucket_view): after a synchronised
// backward the shards' .grad are views of this rank's reduce-scattered chunk and the parameters'
// own .grad are dropped (until step() zeroes the buckets and makes them views again), so clip with
// clip_grad_norm_ below, and share GradScaler's found-inf flag (dist::share_found_inf): each rank
// only sees its shard. zero_grad() acts on the shards: set_to_none drops a shard's view (the next
// backward makes it again), otherwise zeroes it in the bucket. Its
// state_dict() throws (one rank holds only its part): save with dist::save_zero_checkpoint, or
// take consolidated_state_dict().
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "distributed/data_parallel/ddp.h"
#include "distributed/data_parallel/zero_reducer.h"
#include "optim/optimizer.h"

namespace kiln::dist {

/// Builds the wrapped optimizer over the shards' parameter groups.
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;

/// optimizer_factory<optim::Adam>(optim::AdamOptions(1e-3)): a factory for any optimizer with a
/// (groups, options) constructor.
template <class Opt, class OptOptions>
OptimizerFactory optimizer_factory(OptOptions options) {
  return [options](std::vector<optim::ParamGroup> groups) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<Opt>(std::move(groups), options);
  };
}

class ZeroRedundancyOptimizer final : public optim::Optimizer {
 public:
  /// One parameter group: every parameter of `ddp` that requires a gradient. Replaces ddp's
  /// all-reducing reducer with the reduce-scattering one (same bucket sizes and overlap).
  ZeroRedundancyOptimizer(DistributedDataParallel& ddp, const OptimizerFactory& make);
  /// Parameter groups over ddp's parameters (each in exactly one group, every trained one in
  /// some group); group options as the wrapped optimizer takes them.
  ZeroRedundancyOptimizer(DistributedDataParallel& ddp, std::vector<optim::ParamGroup> groups,
                          const OptimizerFactory& make);

  /// Steps this rank's shards with the wrapped optimizer (group options such as a scheduler's lr
  /// are passed on first), then all-gathers the parameters. A collective.
  void step() override;
  /// dist::clip_grad_norm_ over the shards: the norm of the whole gradient, every rank scaling
  /// by the same coefficient. A collective; returns the total norm.
  double clip_grad_norm_(double max_norm, double norm_type = 2.0);

  /// Throws: one rank holds only its shard. Use consolidated_state_dict() or shard_state_dict().
  optim::StateDict state_dict() const override;
  void load_state_dict(const optim::StateDict& state) override;

  /// The state an unsharded run of the wrapped optimizer would have (its state_dict layout,
  /// parameters indexed by their position in the groups, master copies included), on every
  /// rank. A collective.
  optim::StateDict consolidated_state_dict();
  /// Loads such a state (from an unsharded optimizer or consolidated_state_dict()): each rank
  /// keeps its shard. Validates everything before changing anything. Not a collective.
  void load_consolidated_state_dict(const optim::StateDict& state);
  /// This rank's shard of the state (the wrapped optimizer's state_dict over the shards), and
  /// its loader (same world size and buckets, or an error naming the mismatch).
  optim::StateDict shard_state_dict() const { return inner_->state_dict(); }
  void load_shard_state_dict(const optim::StateDict& state);

  /// The wrapped optimizer (over the shards), the shards and their reducer.
  optim::Optimizer& inner() { return *inner_; }
  std::vector<Tensor> shards() const;
  ZeroReducer& reducer() { return *reducer_; }
  /// Bytes of optimizer state this rank holds (every state tensor of the wrapped optimizer).
  int64_t state_bytes() const;

 protected:
  std::vector<std::string> state_names() const override { return {}; }

 private:
  struct Parts;
  ZeroRedundancyOptimizer(DistributedDataParallel& ddp, Parts parts);
  static Parts build(DistributedDataParallel& ddp, std::vector<optim::ParamGroup> groups, const OptimizerFactory& make);
  /// Copies the wrapped optimizer's group options into this one's (after a load).
  void take_inner_options();

  std::shared_ptr<ProcessGroup> pg_;
  std::shared_ptr<ZeroReducer> reducer_;
  std::unique_ptr<optim::Optimizer> inner_;
  std::vector<size_t> bucket_at_;      // inner parameter index -> bucket
  std::vector<int64_t> global_index_;  // reducer parameter -> index in the unsharded optimizer
  std::vector<int64_t> group_sizes_;   // parameters per user group
};

}  // namespace kiln::dist
