// ZeRO-2 and ZeRO-3 for the pipelined GPT (--pipeline-stages P --ddp --zero 2|3, or --fsdp; with
// --tp T too: 3D). Each pipeline stage's parameters (its blocks, and the embedding or the head) are
// sharded over that stage's data-parallel group (the ranks holding the same stage, and the same
// tensor rank, in the other replicas: dist::ParallelLayout's data group):
//   - every parameter is cut, flattened and zero-padded, into N equal chunks (N the data size);
//     data rank d keeps chunk d as an f32 leaf, the optimizer's parameter (AdamW's moments are
//     chunk-sized: sharded under both stages);
//   - the stage's whole gradients accumulate over every micro-batch and accumulation step of the
//     optimizer step (the pipeline's own schedule runs unchanged), and are reduce-scattered
//     (averaged) over the data group ONCE per step, after the stage's last micro-batch backward
//     and the tied head's sum; the whole gradients are then freed;
//   - the norm for clipping is summed over the shards (data group), the stages and the tensor
//     group, counting the tied matrix once and a tensor-replicated parameter on tensor rank 0;
//   - AdamW steps the shards; ZeRO-2 all-gathers them into the whole parameters at once (the
//     parameters stay replicated); ZeRO-3 frees the whole parameters' storage and all-gathers
//     them before the next step's first forward (or an evaluation, or a checkpoint), and keeps
//     them gathered for the whole step: every micro-batch's forward and backward runs on them.
// So ZeRO-3 here saves the parameters' memory between steps only, not during one: a pipeline stage
// holds 1/P of the model already, and regathering each block for every micro-batch's forward and
// again for its backward (as FSDP's units do) would multiply the all-gathers by 2 x micro-batches;
// this is what PyTorch's FSDP2 does with pipelining when reshard_after_forward is off.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/backend/process_group.h"
#include "optim/adam.h"
#include "train/gpt_trainer.h"

namespace kiln::train::gpt {

class ShardedStage {
 public:
  /// `named`: the stage's parameters (the GPT's names, kHeadCopy for the head's copy), in the
  /// order make_optimizer(c, named) would take them; `data`: the stage's data-parallel group;
  /// `comm`: where the collectives' tensors live. Every rank's parameters must be equal (they are
  /// made from the same seed). zero: 2 or 3. Under ZeRO-3 the whole parameters are freed here.
  ShardedStage(const TrainConfig& c, const nn::NamedTensors& named, std::shared_ptr<dist::ProcessGroup> data,
               Device comm);

  /// AdamW over this rank's shards, the one-process groups (decay on the matrices but the
  /// embeddings) and indices (make_optimizer's over `named`).
  optim::AdamW& optimizer() { return *opt_; }

  /// Makes the whole parameters current (an all-gather of the shards over the data group when
  /// they are stale or freed; nothing otherwise). A collective over the data group.
  void gather();
  /// Averages the whole gradients over the data group into the shards' gradients (one
  /// reduce-scatter) and frees them. A collective over the data group.
  void reduce_scatter();
  /// Clips the shards' gradients by the global norm: the squares of the gradients `counted`
  /// (by the index in `named`) summed here and over each of `groups`; returns the norm.
  double clip_grad_norm(double max_norm, const std::vector<bool>& counted,
                        const std::vector<dist::ProcessGroup*>& groups);
  /// After the optimizer's step: ZeRO-2 gathers the new parameters, ZeRO-3 frees them.
  void after_step();

  /// The state_dict of make_optimizer(c, named) over the whole parameters, put together from the
  /// shards' (a collective over the data group).
  optim::StateDict whole_state() const;
  /// Loads this rank's part of `whole` (the state_dict of make_optimizer(c, named)).
  void load_whole_state(const optim::StateDict& whole);

  /// Elements this rank keeps (its shards, padding included).
  int64_t local_numel() const;
  int zero() const { return zero_; }

 private:
  void release();
  struct Param {
    std::string name;
    Tensor whole;      // the stage's parameter (its storage freed while released, under ZeRO-3)
    Tensor shard;      // [chunk] f32 leaf: this rank's chunk of whole, flattened and padded
    int64_t chunk = 0, offset = 0;  // offset: in the concatenation of a rank's chunks
    bool freeable = false;          // whole owns all of its storage
  };
  std::vector<Param> params_;     // in `named`'s order
  std::vector<size_t> by_index_;  // the optimizer's index -> params_
  std::shared_ptr<dist::ProcessGroup> data_;
  Device comm_;
  int zero_ = 2;
  int64_t per_rank_ = 0;  // the sum of the chunks
  bool current_ = true;   // the whole parameters hold the shards' values
  bool released_ = false;
  std::unique_ptr<optim::AdamW> opt_;
};

}  // namespace kiln::train::gpt
