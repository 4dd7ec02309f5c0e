// The GPT under pipeline parallelism (--pipeline-stages P --micro-batches M --pipeline-schedule S,
// one rank per stage under //distributed/launch). The model becomes a list of layers for
// dist::Pipeline: [embedding (wte + wpe, dropout), block 0, ..., block L-1, head (ln_f and the LM
// head)]. The LM head is tied to wte; with the embedding on the first stage and the head on the
// last, the tie is kept as Megatron-LM keeps it: the head holds its own copy of the matrix (equal
// to wte at the start), after each backward the first and last stage all-reduce (sum) the two
// copies' gradients, so each gets the gradient the one tied matrix gets in one process, and the
// same optimizer update keeps the copies identical. The global gradient norm counts the matrix
// once, and checkpoints keep one key ("wte.weight": the head's copy is left out).
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "distributed/pipeline/pipeline.h"
#include "distributed/tensor_parallel/parallel_layout.h"
#include "models/gpt_tensor_parallel.h"
#include "models/gpt_model.h"
#include "train/gpt_trainer.h"

namespace kiln::train::gpt {

/// Token ids [B, T] -> drop(wte(ids) + wpe(positions)) [B, T, C], with the GPT's own modules.
class Embed : public nn::Module {
 public:
  explicit Embed(const GPT& model);
  Tensor forward(const Tensor& idx) override;
  nn::ModulePtr<nn::Embedding> wte, wpe;
  nn::ModulePtr<nn::Dropout> drop;
  int64_t block_size;
};

/// [B, T, C] -> logits [B, T, V]: the GPT's ln_f, then the LM head with its own copy of wte.
class Head : public nn::Module {
 public:
  explicit Head(const GPT& model);
  Tensor forward(const Tensor& x) override;
  nn::ModulePtr<nn::LayerNorm> ln_f;
  Tensor weight;  // the tied copy
};

/// The tensor-parallel GPT's embedding (Embed with the vocabulary split: each rank looks up its
/// rows, the sum all-reduced) and head (ln_f, the input's gradient all-reduced, then this rank's
/// vocabulary rows of the logits, with its own copy of its wte shard): models/gpt_tensor_parallel.h.
class TensorParallelEmbed : public nn::Module {
 public:
  explicit TensorParallelEmbed(const models::gpt::TensorParallelGPT& model);
  Tensor forward(const Tensor& idx) override;
  nn::ModulePtr<dist::tp::VocabParallelEmbedding> wte;
  nn::ModulePtr<nn::Embedding> wpe;
  nn::ModulePtr<nn::Dropout> drop;
  int64_t block_size;
};

class TensorParallelHead : public nn::Module {
 public:
  TensorParallelHead(const models::gpt::TensorParallelGPT& model, dist::tp::GroupPtr group);
  Tensor forward(const Tensor& x) override;
  nn::ModulePtr<nn::LayerNorm> ln_f;
  Tensor weight;  // the tied copy of this rank's wte rows

 private:
  dist::tp::GroupPtr group_;
};

/// The layers of a TensorParallelGPT in gpt_layers' order (no sequence parallelism, no
/// activation checkpointing), sharing its modules.
std::shared_ptr<nn::Sequential> tensor_parallel_layers(const models::gpt::TensorParallelGPT& model,
                                                       dist::tp::GroupPtr group);

/// A block run under nn::checkpoint (--activation-checkpointing): its activations are recomputed
/// in backward, as GPT::forward does with checkpoint_activations. It holds the block's children
/// under their own names, so its parameters keep the block's names.
class CheckpointedBlock : public nn::Module {
 public:
  explicit CheckpointedBlock(std::shared_ptr<nn::Module> block);
  Tensor forward(const Tensor& x) override;

 private:
  std::shared_ptr<nn::Module> block_;
};

/// The layers of `model` in order, sharing its modules (the head's weight is a copy of wte's);
/// the blocks are CheckpointedBlocks when model.config.checkpoint_activations.
std::shared_ptr<nn::Sequential> gpt_layers(const GPT& model);

/// The unsplit GPT's name of a pipeline (layer-index) name: "0.wte.weight" -> "wte.weight",
/// "3.attn.c_attn.bias" -> "h.2.attn.c_attn.bias", "<L+1>.ln_f.weight" -> "ln_f.weight"; the
/// head's copy "<L+1>.weight" -> "" (the merged checkpoint keeps wte's).
std::string gpt_name(const std::string& global, int64_t n_layer);

/// The tie between the first stage's wte and the last stage's head copy.
class TiedHead {
 public:
  /// A collective over the default group (it makes each replica's first/last stage group, with
  /// world rank = replica x stages + stage, as dist::pipeline_groups): every rank calls it.
  explicit TiedHead(dist::Pipeline& pipe, int replicas = 1);
  /// The same in a data x pipeline x tensor layout: one group per (replica, tensor rank), its
  /// first and last stage (each tensor rank's copies hold the same vocabulary rows).
  TiedHead(dist::Pipeline& pipe, const dist::ParallelLayout& layout);
  /// After the step's backward: the first and last stage sum their copies' gradients.
  void sync_gradients();
  /// Clips every gradient of the stages to `max_norm` by their global norm, counting the tied
  /// matrix once (the last stage's copy is scaled, not counted). Returns the norm on every rank.
  double clip_grad_norm(double max_norm);
  /// With tensor parallelism: the squares are summed over the pipeline and the `tensor` group, a
  /// parameter `replicated` says is whole on every tensor rank (by its global name) counted on
  /// tensor rank 0 only.
  double clip_grad_norm(double max_norm, dist::ProcessGroup& tensor,
                        const std::function<bool(const std::string& global_name)>& replicated);
  /// The largest difference between the two copies (stage 0 sends its own to the last stage),
  /// on every rank: 0 while the tie holds. A collective over the pipeline's group.
  double divergence();

 private:
  dist::Pipeline& pipe_;
  std::shared_ptr<dist::ProcessGroup> ends_;  // stages 0 and p-1 (null on the others)
  Tensor tied_;                               // wte on stage 0, the copy on the last stage
};

/// train() with config.pipeline_stages > 1: one rank per stage (WORLD_SIZE == stages), or with
/// --ddp stages x replicas (rank = replica x stages + stage; each replica reads the rows a
/// one-process --ddp rank reads, and the stage's gradients are averaged over the replicas). The
/// same data order, optimizer, schedule and clipping as one process; the last stage's losses are
/// broadcast so rank 0 logs them. --amp bf16 runs each stage's forward (and the loss) under
/// autocast, --activation-checkpointing wraps the blocks in CheckpointedBlock, and
/// --init-from-hf loads the whole model every rank builds before the split. --save writes one
/// merged checkpoint in the one-process trainer's format (gpt_pipeline_checkpoint.h: the GPT's
/// names, AdamW's state), which --resume loads into any split, as it does the one-process
/// trainer's; --save-hf writes the merged weights from rank 0. With --tp T it is 3D: world =
/// data x stages x T from one dist::ParallelLayout (rank = (replica x stages + stage) x T +
/// tensor), each stage made of tensor_parallel_layers, the tie kept per (replica, tensor rank),
/// the norm summed over the tensor group too, and the checkpoint gathered over the tensor group
/// (save_tensor_parallel_pipeline_checkpoint). With --zero 2|3 (--fsdp) each stage is sharded
/// over its data-parallel group (gpt_pipeline_zero.h), the checkpoint gathered to the same format.
/// Throws naming the flag for --zero 1 or --hsdp-shard-size (not supported) or a wrong launch.
/// The closing sample is skipped (the model is split).
TrainResult train_pipeline(const TrainConfig& config, std::ostream& log);

}  // namespace kiln::train::gpt
