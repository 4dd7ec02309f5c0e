// The GPT split over a tensor-parallel group, as Megatron-LM splits GPT-2: each block's attention
// heads (q, k, v rows of c_attn by head; c_proj by input) and MLP hidden features (c_fc by
// output, c_proj by input) divided among the ranks, the vocabulary divided for the embedding,
// the tied LM head and the loss (vocab_parallel_cross_entropy: the full logits are never
// gathered). Position table and LayerNorms are replicated. Built from a whole GPT, so a TP run
// starts from the weights one process would; parameter names are the GPT's, each holding this
// rank's shard. Two all-reduces forward and two backward per block, as in Megatron; with
// `sequence_parallel` each becomes a reduce-scatter / all-gather pair and the LayerNorms and
// residual stream hold 1/T of the sequence (their replicated weights' gradients summed). Dropout
// as Megatron's RNG tracker (distributed/tensor_parallel/random.h): the same mask on every rank
// where activations are replicated, a mask per rank over its heads (and its part of the sequence).
#pragma once

#include <memory>
#include <string>

#include "distributed/tensor_parallel/layers.h"
#include "models/gpt_model.h"
#include "nn/nn.h"

namespace kiln::models::gpt {

class TensorParallelGPT : public nn::Module {
 public:
  /// Throws naming the numbers unless n_head, 4 n_embd and vocab_size divide by the group's size.
  TensorParallelGPT(const GPT& whole, dist::tp::GroupPtr group, bool sequence_parallel = false);
  /// Token ids [B, T] -> this rank's columns of the logits, [B, T, vocab_size / group size].
  Tensor forward(const Tensor& idx) override;
  /// Mean next-token cross-entropy of the split logits against targets [B, T]; the same on every
  /// rank, and equal to GPT::loss of the gathered logits.
  Tensor loss(const Tensor& local_logits, const Tensor& targets) const;

  const GPTConfig config;
  nn::ModulePtr<dist::tp::VocabParallelEmbedding> wte;  // also the LM head's rows
  nn::ModulePtr<nn::Embedding> wpe;
  nn::ModulePtr<nn::Dropout> drop;
  nn::ModulePtr<nn::Sequential> h;
  nn::ModulePtr<nn::LayerNorm> ln_f;

 private:
  dist::tp::GroupPtr group_;
  bool sequence_parallel_;
};

/// Checks that `c` splits over `tp_size` ranks; throws naming the field, its value and the size.
void check_tensor_parallel(const GPTConfig& c, int tp_size);

/// How TensorParallelGPT splits the GPT's parameter `name` (and anything shaped like it, such as
/// AdamW's moments): along `dim` (-1: replicated, whole on every rank), each of `parts` stacked
/// blocks separately (3 for c_attn's q, k, v).
struct ParameterSplit {
  int64_t dim = -1;
  int64_t parts = 1;
};
ParameterSplit parameter_split(const std::string& name);
/// This rank's shard of the whole tensor `whole` of parameter `name` (a copy).
Tensor shard_of(const std::string& name, const Tensor& whole, const dist::ProcessGroup& group);
/// The whole tensor put together from every rank's `shard` of parameter `name` (a collective over
/// `group`; a replicated one is returned as this rank holds it).
Tensor whole_of(const std::string& name, const Tensor& shard, dist::ProcessGroup& group);

}  // namespace kiln::models::gpt
