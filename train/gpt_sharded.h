// The GPT trainer with its weights sharded: tensor parallel (--tp T: each block's heads and MLP
// features, and the vocabulary, split over T ranks as Megatron-LM splits them;
// models/gpt_tensor_parallel.h) and fully sharded data parallel (--zero 2|3, or --fsdp for 3:
// dist::FullyShardedDataParallel over the data-parallel ranks, the blocks its units), alone or
// together, with --ddp (--amp gathering FSDP's units in bf16/f16; --hsdp-shard-size for hybrid
// sharding): world = data x tensor ranks, every group built from one
// dist::ParallelLayout (tensor rank fastest, as Megatron's initialize_model_parallel) and the
// layout printed by rank 0. Each data-parallel rank reads the rows a one-process --ddp rank of
// the same data size reads; its tensor-parallel peers read the same ones. The same AdamW (decay
// spared on biases, LayerNorms and embeddings: under FSDP, whose shards mix them, by a
// per-element mask), schedule and clipping by the global norm as one process. --save writes the
// one-process trainer's format (the weights and AdamW's state gathered, the GPT's names), so a
// sharded run resumes into any layout (another data or tensor size, one process, --ddp, --zero 1,
// a pipeline) and the other trainers resume its checkpoints.
#pragma once

#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "distributed/data_parallel/ddp.h"
#include "distributed/fsdp/fsdp.h"
#include "distributed/tensor_parallel/parallel_layout.h"
#include "models/gpt_tensor_parallel.h"
#include "optim/adam.h"
#include "train/gpt_trainer.h"

namespace kiln::train::gpt {

/// True when `c` asks for the sharded trainer (tp > 1 or zero >= 2).
bool is_sharded(const TrainConfig& c);

/// The layout of a sharded run over `world` ranks; throws naming the numbers for one that cannot
/// work (a world that is not data x tensor, data ranks without --ddp, heads or vocabulary not
/// divisible by T, --zero 1 with --tp, activation checkpointing under FSDP, any --pipeline-stages).
/// --tp and --zero 2|3 with --pipeline-stages are the pipelined trainer's (gpt_pipeline.h: 3D;
/// gpt_pipeline_zero.h).
dist::ParallelLayout sharded_layout(const TrainConfig& c, int world);

/// train() when is_sharded(config).
TrainResult train_sharded(const TrainConfig& config, std::ostream& log);

/// The model of a sharded run, what its forward runs through, and how its parameters and
/// AdamW's state map to the one-process GPT's.
struct ShardedGPT {
  dist::ParallelGroups groups;
  std::shared_ptr<models::gpt::TensorParallelGPT> tp;  // --tp > 1
  std::shared_ptr<GPT> whole;                           // --tp 1 (FSDP's views once wrapped)
  std::shared_ptr<dist::FullyShardedDataParallel> fsdp;  // --zero 2|3
  std::shared_ptr<dist::DistributedDataParallel> ddp;    // --ddp over more than one data rank, no FSDP
  std::vector<std::string> names;                 // the GPT's parameter names, in order
  std::vector<std::vector<std::string>> layout;   // optimizer_layout of the one-process GPT
  optim::StateDict whole_groups;                  // the one-process AdamW's "param_groups.*" keys
  std::vector<std::string> opt_names;             // without FSDP: the optimizer's parameters by index
  std::vector<Tensor> norm_masks;                 // FSDP with --tp: 1 where the norm counts an element
  Device comm = kCPU;                             // where the collectives' tensors live

  /// The tensor-parallel model or the whole GPT: the parameters by the GPT's names.
  nn::Module& model();
  /// What the training forward runs through (FSDP, DDP or the model).
  nn::Module& net();
  /// The loss of net()'s logits (vocabulary-parallel under --tp).
  Tensor loss(const Tensor& logits, const Tensor& targets) const;
  int tensor_size() const { return groups.tensor ? groups.tensor->size() : 1; }
};

/// AdamW over FSDP's flat shards with the one-process trainer's decoupled weight decay: before
/// each step every shard is multiplied by 1 - lr x weight_decay where its mask is 1 (the
/// elements of decayed matrices) and left alone where it is 0; the group itself has no decay.
/// Only the runs of ones are kept, not the masks.
class ShardedAdamW : public optim::AdamW {
 public:
  ShardedAdamW(std::vector<Tensor> shards, std::vector<Tensor> decay_masks, optim::AdamOptions options,
               double weight_decay);
  void step() override;

 private:
  std::vector<Tensor> shards_;
  // Per shard, the (offset, length) runs where its mask is 1: the masks themselves would cost as
  // much memory as a moment (two shard-sized f32 tensors, mask and 1 - mask).
  std::vector<std::vector<std::pair<int64_t, int64_t>>> decayed_;
  double weight_decay_;
};

/// Builds `m`'s model from `whole` (this rank's one-process GPT, on its device; released here) as
/// the sharded trainer runs it: split over m.groups.tensor (--tp > 1), then fully sharded (--zero
/// 2|3: FSDP over m.groups.data, the blocks its units; gathered in bf16/f16 under --amp, gradients
/// reduced in f32; HSDP with --hsdp-shard-size) or replicated (DDP with --ddp over more than one
/// data rank). m.groups must be made from `layout`. A collective.
void wrap_sharded(ShardedGPT& m, const TrainConfig& c, const dist::ParallelLayout& layout, std::shared_ptr<GPT> whole);

/// The optimizer of a sharded run: make_optimizer over the model's parameters, or ShardedAdamW
/// over FSDP's shards.
std::unique_ptr<optim::Optimizer> make_sharded_optimizer(const TrainConfig& c, ShardedGPT& m);

/// Clips every gradient by the global norm of the one-process model's gradient: the squares
/// summed over the tensor group (a replicated parameter counted on tensor rank 0 only) and, under
/// FSDP, over the data group. A collective; returns the norm.
double clip_sharded_grad_norm(ShardedGPT& m, double max_norm);

/// The one-process GPT's weights by name, gathered (a collective over every group).
nn::StateDict whole_weights(ShardedGPT& m);
/// The one-process AdamW's state_dict (indexed as make_optimizer over the whole GPT indexes it),
/// gathered from `opt` (a collective).
optim::StateDict whole_optimizer_state(ShardedGPT& m, const optim::Optimizer& opt);
/// This rank's part of the one-process AdamW's `whole` state, for `opt` (not a collective).
optim::StateDict local_optimizer_state(ShardedGPT& m, const optim::StateDict& whole, const optim::Optimizer& opt);

}  // namespace kiln::train::gpt
