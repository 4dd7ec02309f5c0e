#include "models/gpt_tensor_parallel.h"

#include <optional>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "distributed/tensor_parallel/random.h"
#include "nn/functional.h"

namespace kiln::models::gpt {
namespace F = nn::functional;
namespace tp = dist::tp;

namespace {

/// A module's copy with `src`'s parameter values (LayerNorm, Embedding: replicated on each rank).
template <class M> void copy_parameters(const M& src, M& dst) {
  NoGradGuard g;
  auto s = src.named_parameters(), d = dst.named_parameters();
  for (size_t i = 0; i < s.size(); ++i) d[i].second.copy_(s[i].second);
}

/// A replicated LayerNorm; under sequence parallelism its gradients are summed over the group.
std::shared_ptr<nn::LayerNorm> layer_norm_like(const nn::LayerNorm& src, const tp::GroupPtr& g, bool sp) {
  auto ln = std::make_shared<nn::LayerNorm>(src.normalized_shape, src.eps);
  copy_parameters(src, *ln);
  if (sp)
    for (const Tensor& p : ln->parameters()) tp::mark_replicated(p, g);
  return ln;
}

class ParallelAttention : public nn::Module {
 public:
  ParallelAttention(const CausalSelfAttention& whole, const GPTConfig& c, const tp::GroupPtr& g, tp::SequenceParallel sp)
      : local_heads_(c.n_head / g->size()), head_dim_(c.n_embd / c.n_head), dropout_(c.dropout), group_(g) {
    c_attn = register_module("c_attn", tp::ColumnParallelLinear(*whole.c_attn, g, false, /*parts=*/3, sp));
    c_proj = register_module("c_proj", tp::RowParallelLinear(*whole.c_proj, g, true, sp));
    // After the row-parallel all-reduce the output is whole on every rank (a replicated region),
    // but under sequence parallelism each rank holds its part of the sequence (a sharded one).
    resid_dropout = register_module("resid_dropout", std::make_shared<tp::ParallelDropout>(c.dropout, g, sp.enabled));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = c_attn(x);  // [B, T, 3 C / T]: the whole sequence, this rank's heads
    const int64_t b = h.size(0), t = h.size(1), width = local_heads_ * head_dim_;
    std::vector<Tensor> qkv = h.split(width, 2);
    auto heads = [&](const Tensor& m) { return m.reshape({b, t, local_heads_, head_dim_}).transpose(1, 2); };
    // This rank's heads are a sharded region: their dropout mask is this rank's own.
    const double p = is_training() ? dropout_ : 0.0;
    std::optional<Generator> gen;
    if (p > 0) gen.emplace(tp::sharded_region_seed(*group_));
    Tensor y = F::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]),
                                               {.dropout_p = p, .causal = true, .generator = gen ? &*gen : nullptr});
    return resid_dropout(c_proj(y.transpose(1, 2).reshape({b, t, width})));
  }

  nn::ModulePtr<tp::ColumnParallelLinear> c_attn;
  nn::ModulePtr<tp::RowParallelLinear> c_proj;
  nn::ModulePtr<tp::ParallelDropout> resid_dropout;

 private:
  int64_t local_heads_, head_dim_;
  double dropout_;
  tp::GroupPtr group_;
};

class ParallelMLP : public nn::Module {
 public:
  ParallelMLP(const MLP& whole, const GPTConfig& c, const tp::GroupPtr& g, tp::SequenceParallel sp) {
    c_fc = register_module("c_fc", tp::ColumnParallelLinear(*whole.c_fc, g, false, 1, sp));
    c_proj = register_module("c_proj", tp::RowParallelLinear(*whole.c_proj, g, true, sp));
    dropout = register_module("dropout", std::make_shared<tp::ParallelDropout>(c.dropout, g, sp.enabled));
  }
  Tensor forward(const Tensor& x) override {
    return dropout(c_proj(F::gelu(c_fc(x), "tanh")));
  }

  nn::ModulePtr<tp::ColumnParallelLinear> c_fc;
  nn::ModulePtr<tp::RowParallelLinear> c_proj;
  nn::ModulePtr<tp::ParallelDropout> dropout;
};

class ParallelBlock : public nn::Module {
 public:
  ParallelBlock(const Block& whole, const GPTConfig& c, const tp::GroupPtr& g, tp::SequenceParallel sp) {
    ln_1 = register_module("ln_1", layer_norm_like(*whole.ln_1, g, sp.enabled));
    attn = register_module("attn", std::make_shared<ParallelAttention>(*whole.attn, c, g, sp));
    ln_2 = register_module("ln_2", layer_norm_like(*whole.ln_2, g, sp.enabled));
    mlp = register_module("mlp", std::make_shared<ParallelMLP>(*whole.mlp, c, g, sp));
  }
  Tensor forward(const Tensor& x) override {
    Tensor y = x + attn(ln_1(x));
    return y + mlp(ln_2(y));
  }

  nn::ModulePtr<nn::LayerNorm> ln_1, ln_2;
  nn::ModulePtr<ParallelAttention> attn;
  nn::ModulePtr<ParallelMLP> mlp;
};

}  // namespace

void check_tensor_parallel(const GPTConfig& c, int tp_size) {
  KILN_CHECK(tp_size >= 1, "GPT tensor parallel: size {} must be at least 1", tp_size);
  KILN_CHECK(c.n_head % tp_size == 0, "GPT tensor parallel: n_head {} does not divide by the tensor-parallel size {}",
             c.n_head, tp_size);
  KILN_CHECK(c.vocab_size % tp_size == 0,
             "GPT tensor parallel: vocab_size {} does not divide by the tensor-parallel size {} (pad the vocabulary, "
             "e.g. --vocab-size {})", c.vocab_size, tp_size, (c.vocab_size + tp_size - 1) / tp_size * tp_size);
  KILN_CHECK(!c.checkpoint_activations, "GPT tensor parallel: activation checkpointing is not supported with --tp");
}

ParameterSplit parameter_split(const std::string& name) {
  auto is = [&](const char* suffix) { return name.ends_with(suffix); };
  if (name == "wte.weight") return {0, 1};  // vocabulary rows
  if (is(".attn.c_attn.weight") || is(".attn.c_attn.bias")) return {0, 3};  // heads of q, k and v
  if (is(".mlp.c_fc.weight") || is(".mlp.c_fc.bias")) return {0, 1};
  if (is(".c_proj.weight")) return {1, 1};  // row-parallel: input features
  return {};  // wpe, LayerNorms, the row-parallel biases
}

Tensor shard_of(const std::string& name, const Tensor& whole, const dist::ProcessGroup& group) {
  const ParameterSplit s = parameter_split(name);
  if (s.dim < 0 || group.size() == 1) return whole.detach().clone();
  const int64_t n = group.size(), per_part = whole.size(s.dim) / s.parts, shard = per_part / n;
  KILN_CHECK(per_part % n == 0 && per_part * s.parts == whole.size(s.dim),
             "GPT tensor parallel: '{}' of shape {} does not split into {} x {} along dim {}", name, whole.shape_str(),
             s.parts, n, s.dim);
  std::vector<Tensor> pieces;
  for (int64_t p = 0; p < s.parts; ++p)
    pieces.push_back(whole.detach().narrow(s.dim, p * per_part + group.rank() * shard, shard));
  return cat(pieces, s.dim).contiguous().clone();
}

Tensor whole_of(const std::string& name, const Tensor& shard, dist::ProcessGroup& group) {
  const ParameterSplit s = parameter_split(name);
  if (s.dim < 0 || group.size() == 1) return shard.detach().clone();
  const int64_t n = group.size(), per = shard.size(s.dim) / s.parts;
  Tensor all = dist::tp::all_gather(shard.detach().contiguous(), group, s.dim);  // rank after rank
  // Rank r's block holds its rows of each part in part order: regroup part by part.
  std::vector<Tensor> pieces;
  for (int64_t p = 0; p < s.parts; ++p)
    for (int64_t r = 0; r < n; ++r) pieces.push_back(all.narrow(s.dim, (r * s.parts + p) * per, per));
  return cat(pieces, s.dim).contiguous();
}

TensorParallelGPT::TensorParallelGPT(const GPT& whole, tp::GroupPtr group, bool sequence_parallel)
    : nn::Module("TensorParallelGPT"), config(whole.config), group_(std::move(group)),
      sequence_parallel_(sequence_parallel) {
  const tp::SequenceParallel sp{.enabled = sequence_parallel, .dim = 1};
  check_tensor_parallel(config, group_->size());
  wte = register_module("wte", tp::VocabParallelEmbedding(*whole.wte, group_));
  wpe = register_module("wpe", nn::Embedding(config.block_size, config.n_embd));
  copy_parameters(*whole.wpe, *wpe);
  drop = register_module("drop", nn::Dropout(config.dropout));
  h = register_module("h", nn::Sequential());
  for (size_t i = 0; i < whole.h->size(); ++i)
    h->push_back(std::make_shared<ParallelBlock>(dynamic_cast<const Block&>(*(*whole.h)[i]), config, group_, sp));
  ln_f = register_module("ln_f", layer_norm_like(*whole.ln_f, group_, sequence_parallel));
}

Tensor TensorParallelGPT::forward(const Tensor& idx) {
  KILN_CHECK(idx.dim() == 2 && idx.dtype() == kInt64, "TensorParallelGPT: expected token ids [B, T] of i64, got {} {}",
             idx.shape_str(), idx.dtype());
  const int64_t t = idx.size(1);
  KILN_CHECK(t <= config.block_size, "TensorParallelGPT: sequence of {} tokens is longer than block_size {}", t,
             config.block_size);
  Tensor pos = arange(t, TensorOptions().dtype(kInt64).device(idx.device()));
  Tensor x = drop(wte(idx) + wpe(pos));
  if (sequence_parallel_) {
    KILN_CHECK(t % group_->size() == 0,
               "TensorParallelGPT: sequence parallel needs the sequence ({} tokens) to divide by the tensor-parallel "
               "size {}", t, group_->size());
    x = tp::scatter_to_group(x, group_, 1);  // [B, T / size, C] from here to the head
  }
  x = ln_f(h(x));
  x = sequence_parallel_ ? tp::gather_from_sequence(x, group_, 1) : tp::copy_to_group(x, group_);
  return F::linear(x, wte->weight);  // the tied head: this rank's vocabulary rows
}

Tensor TensorParallelGPT::loss(const Tensor& local_logits, const Tensor& targets) const {
  return tp::vocab_parallel_cross_entropy(local_logits.reshape({-1, local_logits.size(-1)}), targets.reshape({-1}),
                                          group_);
}

}  // namespace kiln::models::gpt
