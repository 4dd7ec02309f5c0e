#include "distributed/tensor_parallel/layers.h"

#include <fmt/format.h>

#include "autograd/node.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "nn/functional.h"

namespace kiln::dist::tp {
namespace F = nn::functional;

void mark_replicated(const Tensor& param, const GroupPtr& group) {
  param.register_hook([group](const Tensor& g) { return all_reduce_sum(g, *group); });
}

void check_divisible(int64_t n, const ProcessGroup& group, const char* what) {
  KILN_CHECK(n % group.size() == 0, "tensor parallel: {} ({}) does not divide by the tensor-parallel size {}", what, n,
             group.size());
}

namespace {

/// Rows [r n/T, (r+1) n/T) of each of `parts` stacked blocks along dim 0, concatenated.
Tensor row_shard(const Tensor& full, const ProcessGroup& g, int64_t parts) {
  const int64_t per_part = full.size(0) / parts, shard = per_part / g.size();
  std::vector<Tensor> pieces;
  for (int64_t p = 0; p < parts; ++p) pieces.push_back(full.detach().narrow(0, p * per_part + g.rank() * shard, shard));
  return cat(pieces, 0).contiguous().clone();
}

/// The ids this rank's vocabulary rows [start, start + rows) hold: (index into the shard, with
/// other ids clamped to a valid row; 1 where held, 0 elsewhere, as `dtype`).
std::pair<Tensor, Tensor> local_ids(const Tensor& ids, int64_t start, int64_t rows, DType dtype) {
  Tensor local = ids - Scalar(start);
  Tensor safe = clamp(local, Scalar(int64_t{0}), Scalar(rows - 1));
  return {safe, eq(safe, local).to(dtype)};
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(const nn::Linear& full, GroupPtr group, bool gather_output, int64_t parts,
                                           SequenceParallel sp)
    : nn::Module("ColumnParallelLinear"),
      in_features(full.in_features),
      out_features(full.out_features),
      group_(std::move(group)),
      gather_output_(gather_output),
      sp_(sp) {
  KILN_CHECK(parts >= 1 && out_features % parts == 0, "ColumnParallelLinear: {} output features in {} parts",
             out_features, parts);
  KILN_CHECK(!(gather_output && parts > 1), "ColumnParallelLinear: gather_output with {} stacked parts would interleave "
             "them; gather each part's output instead", parts);
  check_divisible(out_features / parts, *group_, "ColumnParallelLinear's output features per part");
  weight = register_parameter("weight", row_shard(full.weight, *group_, parts));
  if (full.bias.defined()) bias = register_parameter("bias", row_shard(full.bias, *group_, parts));
}

ColumnParallelLinear::ColumnParallelLinear(int64_t in, int64_t out, GroupPtr group, bool bias, bool gather_output)
    : ColumnParallelLinear(nn::Linear(in, out, bias), std::move(group), gather_output) {}

Tensor ColumnParallelLinear::forward(const Tensor& x) {
  Tensor y = F::linear(sp_.enabled ? gather_from_sequence(x, group_, sp_.dim) : copy_to_group(x, group_), weight, bias);
  return gather_output_ ? gather_from_group(y, group_, -1) : y;
}

std::string ColumnParallelLinear::extra_repr() const {
  return fmt::format("in_features={}, out_features={} ({} on this rank of {}), bias={}", in_features, out_features,
                     weight.size(0), group_->size(), bias.defined());
}

RowParallelLinear::RowParallelLinear(const nn::Linear& full, GroupPtr group, bool input_is_parallel, SequenceParallel sp)
    : nn::Module("RowParallelLinear"),
      in_features(full.in_features),
      out_features(full.out_features),
      group_(std::move(group)),
      input_is_parallel_(input_is_parallel),
      sp_(sp) {
  check_divisible(in_features, *group_, "RowParallelLinear's input features");
  weight = register_parameter("weight", rank_slice(full.weight, *group_, 1, "RowParallelLinear"));
  if (full.bias.defined()) bias = register_parameter("bias", full.bias.detach().clone());
  if (sp_.enabled && bias.defined()) mark_replicated(bias, group_);
}

RowParallelLinear::RowParallelLinear(int64_t in, int64_t out, GroupPtr group, bool bias, bool input_is_parallel)
    : RowParallelLinear(nn::Linear(in, out, bias), std::move(group), input_is_parallel) {}

Tensor RowParallelLinear::forward(const Tensor& x) {
  Tensor partial = F::linear(input_is_parallel_ ? x : scatter_to_group(x, group_, -1), weight);
  Tensor y = sp_.enabled ? reduce_scatter_to_group(partial, group_, sp_.dim) : reduce_from_group(partial, group_);
  return bias.defined() ? y + bias : y;
}

std::string RowParallelLinear::extra_repr() const {
  return fmt::format("in_features={} ({} on this rank of {}), out_features={}, bias={}", in_features, weight.size(1),
                     group_->size(), out_features, bias.defined());
}

VocabParallelEmbedding::VocabParallelEmbedding(const nn::Embedding& full, GroupPtr group)
    : nn::Module("VocabParallelEmbedding"),
      num_embeddings(full.num_embeddings),
      embedding_dim(full.embedding_dim),
      group_(std::move(group)) {
  KILN_CHECK(!full.padding_idx.has_value(), "VocabParallelEmbedding: padding_idx is not supported");
  check_divisible(num_embeddings, *group_, "VocabParallelEmbedding's vocabulary");
  vocab_start_ = group_->rank() * (num_embeddings / group_->size());
  weight = register_parameter("weight", rank_slice(full.weight, *group_, 0, "VocabParallelEmbedding"));
}

VocabParallelEmbedding::VocabParallelEmbedding(int64_t num_embeddings, int64_t embedding_dim, GroupPtr group)
    : VocabParallelEmbedding(nn::Embedding(num_embeddings, embedding_dim), std::move(group)) {}

Tensor VocabParallelEmbedding::forward(const Tensor& ids) {
  auto [safe, held] = local_ids(ids, vocab_start_, weight.size(0), weight.dtype());
  return reduce_from_group(F::embedding(safe, weight) * held.unsqueeze(-1), group_);
}

std::string VocabParallelEmbedding::extra_repr() const {
  return fmt::format("{}, {} (rows {}..{} on this rank of {})", num_embeddings, embedding_dim, vocab_start_,
                     vocab_start_ + weight.size(0), group_->size());
}

Tensor vocab_parallel_cross_entropy(const Tensor& logits, const Tensor& targets, const GroupPtr& group) {
  KILN_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
             "vocab_parallel_cross_entropy: logits {} and targets {}: want [N, V/T] and [N]", logits.sizes(),
             targets.sizes());
  KILN_CHECK(targets.dtype() == kInt64, "vocab_parallel_cross_entropy: targets are {}, want int64", targets.dtype());
  const int64_t n = logits.size(0), rows = logits.size(1), vocab = rows * group->size();
  if (n > 0) {
    const int64_t lo = amin(targets).item<int64_t>(), hi = amax(targets).item<int64_t>();
    KILN_CHECK(lo >= 0 && hi < vocab, "vocab_parallel_cross_entropy: target {} is outside the vocabulary [0, {})",
               lo < 0 ? lo : hi, vocab);
  }
  Tensor loss, softmax, one_hot_local;
  {
    NoGradGuard no_grad;
    Tensor z = logits.detach().to(kFloat32);
    Tensor m = amax(z, {1});
    if (group->size() > 1) group->allreduce(m, ReduceOp::kMax)->wait();
    z = z - m.unsqueeze(1);
    Tensor e = exp(z);
    Tensor s = all_reduce_sum(sum(e, {1}), *group);
    auto [safe, held] = local_ids(targets, group->rank() * rows, rows, kFloat32);
    Tensor zt = all_reduce_sum(gather(z, 1, safe.unsqueeze(1)).squeeze(1) * held, *group);
    loss = mean(log(s) - zt);
    softmax = e / s.unsqueeze(1);
    one_hot_local = one_hot(safe, rows).to(kFloat32) * held.unsqueeze(1);
  }
  if (GradMode::is_enabled() && logits.requires_grad()) {
    const DType dtype = logits.dtype();
    autograd::record("VocabParallelCrossEntropyBackward", {logits}, {loss},
                     [softmax, one_hot_local, n, dtype](const std::vector<Tensor>& grads) -> std::vector<Tensor> {
                       if (!grads[0].defined()) return {Tensor()};
                       return {((softmax - one_hot_local) * (grads[0] / Scalar(static_cast<double>(n)))).to(dtype)};
                     });
  }
  return loss;
}

}  // namespace kiln::dist::tp
