// Tensor-parallel layers (Megatron-LM's): a Linear split by output features (column-parallel)
// or by input features (row-parallel), an Embedding split by vocabulary rows, and the
// cross-entropy over vocabulary-split logits that never gathers them. Each is made from the
// whole layer's weights (a one-process model built with the same seed), so a TP run starts
// from exactly the weights one process would train, and each rank keeps only its shard.
//
//   y = RowParallelLinear(act(ColumnParallelLinear(x)))    one all-reduce forward, one backward
#pragma once

#include <memory>
#include <optional>

#include "distributed/tensor_parallel/mappings.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace kiln::dist::tp {

/// Sequence parallelism (Megatron's second step): between the tensor-parallel regions the
/// activations are split along the sequence dim instead of replicated, so LayerNorm and dropout
/// run on 1/T of them. A column-parallel layer then all-gathers its input along that dim
/// (reduce-scattering the gradient), and a row-parallel layer reduce-scatters its output.
struct SequenceParallel {
  bool enabled = false;
  int64_t dim = 1;  // the sequence dim of [B, T, C]
};

/// W [out, in] split by rows: rank r holds out/T output features. forward(x [*, in]) ->
/// [*, out/T] (or the gathered [*, out] with `gather_output`). The input's gradient is
/// all-reduced over the group in backward (copy_to_group), or, sequence-parallel, the input is
/// this rank's part of the sequence, gathered here.
class ColumnParallelLinear : public nn::Module {
 public:
  /// This rank's shard of `full`. `parts`: >1 when W is several stacked matrices split alike
  /// (q, k, v of an attention's [3C, C] projection): each part is split by rows separately, so
  /// a rank holds rows of each part (its heads of q, of k and of v), in part order.
  ColumnParallelLinear(const nn::Linear& full, GroupPtr group, bool gather_output = false, int64_t parts = 1,
                       SequenceParallel sp = {});
  /// A fresh layer initialised as nn::Linear(in, out, bias) would be in one process.
  ColumnParallelLinear(int64_t in, int64_t out, GroupPtr group, bool bias = true, bool gather_output = false);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Tensor weight, bias;  // [out/T, in], [out/T]
  const int64_t in_features, out_features;  // the whole layer's

 private:
  GroupPtr group_;
  bool gather_output_;
  SequenceParallel sp_;
};

/// W [out, in] split by columns: rank r holds in/T input features. forward(x [*, in/T]) (or the
/// whole [*, in], sliced here, when !input_is_parallel) -> [*, out], the partial products summed
/// over the group (reduce_from_group); the bias, whole on every rank, is added once after.
class RowParallelLinear : public nn::Module {
 public:
  /// Sequence-parallel: the output is reduce-scattered along sp.dim, and the bias (whole on
  /// every rank, added to a part of the sequence) has its gradient all-reduced (mark_replicated).
  RowParallelLinear(const nn::Linear& full, GroupPtr group, bool input_is_parallel = true, SequenceParallel sp = {});
  RowParallelLinear(int64_t in, int64_t out, GroupPtr group, bool bias = true, bool input_is_parallel = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Tensor weight, bias;  // [out, in/T], [out]
  const int64_t in_features, out_features;

 private:
  GroupPtr group_;
  bool input_is_parallel_;
  SequenceParallel sp_;
};

/// An Embedding whose rows (the vocabulary) are split: rank r holds ids [r V/T, (r+1) V/T).
/// forward(ids) looks up the ids this rank holds, zeros the rest, and sums over the group.
class VocabParallelEmbedding : public nn::Module {
 public:
  VocabParallelEmbedding(const nn::Embedding& full, GroupPtr group);
  VocabParallelEmbedding(int64_t num_embeddings, int64_t embedding_dim, GroupPtr group);
  Tensor forward(const Tensor& ids) override;
  std::string extra_repr() const override;

  Tensor weight;  // [V/T, C]
  const int64_t num_embeddings, embedding_dim;
  int64_t vocab_start() const { return vocab_start_; }

 private:
  GroupPtr group_;
  int64_t vocab_start_;
};

/// Mean cross-entropy of logits split by vocabulary (rank r holds columns [r V/T, (r+1) V/T) of
/// [N, V]) against targets [N] (int64, in [0, V)), computed with three all-reduces of [N]
/// vectors (max, sum of exp, target logit) and no gather of the logits; equal to
/// cross_entropy(all_gather(logits), targets). The gradient is softmax - one_hot on this rank's
/// columns. Logits of any float dtype are computed in f32.
Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const GroupPtr& group);

/// A parameter whole on every rank but used on one part of the sequence (a LayerNorm, a
/// row-parallel bias, under sequence parallelism): its incoming gradient is summed over the
/// group before it is accumulated, so every rank holds the whole gradient (accumulation-safe).
void mark_replicated(const Tensor& param, const GroupPtr& group);

/// Throws naming `what` and the numbers unless `n` divides by the group's size.
void check_divisible(int64_t n, const ProcessGroup& group, const char* what);

}  // namespace kiln::dist::tp
