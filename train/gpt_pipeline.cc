// The GPT's layers for dist::Pipeline and the tied head across stages; see gpt_pipeline.h.
#include "train/gpt_pipeline.h"

#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "distributed/backend/init.h"
#include "distributed/data_parallel/clip_grad_norm.h"
#include "nn/activation_checkpoint.h"
#include "nn/functional.h"
#include "distributed/tensor_parallel/mappings.h"

namespace kiln::train::gpt {
using namespace models::gpt;

Embed::Embed(const GPT& model) : nn::Module("GPTEmbed"), block_size(model.config.block_size) {
  wte = register_module("wte", model.wte);
  wpe = register_module("wpe", model.wpe);
  drop = register_module("drop", model.drop);
}

Tensor Embed::forward(const Tensor& idx) {
  KILN_CHECK(idx.dim() == 2 && idx.dtype() == kInt64, "GPT embedding: expected token ids [B, T] of i64, got {} {}",
             idx.shape_str(), idx.dtype());
  KILN_CHECK(idx.size(1) <= block_size, "GPT embedding: sequence of {} tokens is longer than block_size {}",
             idx.size(1), block_size);
  Tensor pos = arange(idx.size(1), TensorOptions().dtype(kInt64).device(idx.device()));
  return drop(wte(idx) + wpe(pos));
}

Head::Head(const GPT& model) : nn::Module("GPTHead") {
  ln_f = register_module("ln_f", model.ln_f);
  NoGradGuard g;
  weight = register_parameter("weight", model.wte->weight.detach().clone());
}

Tensor Head::forward(const Tensor& x) { return nn::functional::linear(ln_f(x), weight); }

TensorParallelEmbed::TensorParallelEmbed(const TensorParallelGPT& model)
    : nn::Module("GPTTensorParallelEmbed"), block_size(model.config.block_size) {
  wte = register_module("wte", model.wte);
  wpe = register_module("wpe", model.wpe);
  drop = register_module("drop", model.drop);
}

Tensor TensorParallelEmbed::forward(const Tensor& idx) {
  KILN_CHECK(idx.dim() == 2 && idx.dtype() == kInt64, "GPT embedding: expected token ids [B, T] of i64, got {} {}",
             idx.shape_str(), idx.dtype());
  KILN_CHECK(idx.size(1) <= block_size, "GPT embedding: sequence of {} tokens is longer than block_size {}",
             idx.size(1), block_size);
  Tensor pos = arange(idx.size(1), TensorOptions().dtype(kInt64).device(idx.device()));
  return (*drop)((*wte)(idx) + (*wpe)(pos));
}

TensorParallelHead::TensorParallelHead(const TensorParallelGPT& model, dist::tp::GroupPtr group)
    : nn::Module("GPTTensorParallelHead"), group_(std::move(group)) {
  ln_f = register_module("ln_f", model.ln_f);
  NoGradGuard g;
  weight = register_parameter("weight", model.wte->weight.detach().clone());
}

Tensor TensorParallelHead::forward(const Tensor& x) {
  return nn::functional::linear(dist::tp::copy_to_group((*ln_f)(x), group_), weight);
}

std::shared_ptr<nn::Sequential> tensor_parallel_layers(const TensorParallelGPT& model, dist::tp::GroupPtr group) {
  auto layers = std::make_shared<nn::Sequential>();
  layers->push_back(std::make_shared<TensorParallelEmbed>(model));
  for (size_t i = 0; i < model.h->size(); ++i) layers->push_back((*model.h)[i]);
  layers->push_back(std::make_shared<TensorParallelHead>(model, std::move(group)));
  return layers;
}

CheckpointedBlock::CheckpointedBlock(std::shared_ptr<nn::Module> block)
    : nn::Module("GPTCheckpointedBlock"), block_(std::move(block)) {
  for (auto& [name, child] : block_->named_children()) register_module(name, child);
  KILN_CHECK(block_->named_parameters(/*recurse=*/false).empty(),
             "CheckpointedBlock: the block holds parameters of its own, which this wrapper would not name");
}

Tensor CheckpointedBlock::forward(const Tensor& x) {
  nn::Module* block = block_.get();  // kept alive by this wrapper until backward has run
  return nn::checkpoint([block](const Tensor& in) { return block->forward(in); }, x);
}

std::shared_ptr<nn::Sequential> gpt_layers(const GPT& model) {
  auto layers = std::make_shared<nn::Sequential>();
  layers->push_back(std::make_shared<Embed>(model));
  for (size_t i = 0; i < model.h->size(); ++i) {
    std::shared_ptr<nn::Module> block = (*model.h)[i];
    if (model.config.checkpoint_activations) block = std::make_shared<CheckpointedBlock>(block);
    layers->push_back(block);
  }
  layers->push_back(std::make_shared<Head>(model));
  return layers;
}

std::string gpt_name(const std::string& global, int64_t n_layer) {
  const size_t dot = global.find('.');
  KILN_CHECK(dot != std::string::npos, "gpt_name: '{}' is not a layer's parameter name", global);
  const int64_t i = std::stoll(global.substr(0, dot));
  const std::string rest = global.substr(dot + 1);
  if (i == 0) return rest;                                            // wte.*, wpe.*
  if (i <= n_layer) return fmt::format("h.{}.{}", i - 1, rest);       // the blocks
  KILN_CHECK(i == n_layer + 1, "gpt_name: layer {} of '{}' is past the head ({} blocks)", i, global, n_layer);
  return rest == "weight" ? "" : rest;                                // ln_f.*; the tied copy
}

TiedHead::TiedHead(dist::Pipeline& pipe, int replicas)
    : TiedHead(pipe, dist::ParallelLayout(replicas * pipe.num_stages(), 1, pipe.num_stages())) {}

TiedHead::TiedHead(dist::Pipeline& pipe, const dist::ParallelLayout& layout) : pipe_(pipe) {
  const int p = pipe.num_stages();
  KILN_CHECK(layout.pipeline() == p, "TiedHead: the layout has {} stages, the pipeline {}", layout.pipeline(), p);
  for (int r = 0; r < layout.world(); ++r) {  // every rank makes every group, in the same order
    dist::ParallelCoords c = layout.coords(r);
    if (c.pipeline != 0) continue;
    c.pipeline = p - 1;
    if (auto g = dist::new_group({r, layout.rank_of(c)})) ends_ = g;
  }
  // The tied matrices by their layer-index names: wte in layer 0, the head's copy in the last.
  const std::string last = fmt::format("{}.weight", pipe.boundaries().back() - 1);
  for (auto& [local, t] : pipe.stage_module().named_parameters()) {
    const std::string global = pipe.global_name(local);
    if ((pipe.is_first() && global == "0.wte.weight") || (!pipe.is_first() && pipe.is_last() && global == last))
      tied_ = t;
  }
  KILN_CHECK(!(pipe.is_first() || pipe.is_last()) || tied_.defined(),
             "TiedHead: stage {} holds neither the GPT embedding's wte nor the head's copy", pipe.stage());
}

void TiedHead::sync_gradients() {
  if (!ends_ || ends_->size() < 2) return;  // a middle stage, or one stage holding both
  Tensor g = tied_.grad();
  if (!g.defined()) {  // no gradient reached this copy: it adds nothing
    g = zeros_like(tied_);
    tied_.set_grad(g);
  }
  ends_->allreduce(g)->wait();
}

double TiedHead::clip_grad_norm(double max_norm) {
  std::vector<Tensor> counted;
  for (const Tensor& p : pipe_.parameters())
    if (!(pipe_.is_last() && !pipe_.is_first() && p.is_same(tied_))) counted.push_back(p);
  const double total = dist::clip_grad_norm_(counted, max_norm, pipe_.process_group());
  // The same coefficient dist::clip_grad_norm_ applied to the counted gradients.
  const double coef = max_norm / (total + 1e-6);
  if ((coef < 1 || std::isnan(coef)) && pipe_.is_last() && !pipe_.is_first() && tied_.grad().defined()) {
    NoGradGuard g;
    Tensor(tied_.grad()).mul_(coef);
  }
  return total;
}

double TiedHead::clip_grad_norm(double max_norm, dist::ProcessGroup& tensor,
                                const std::function<bool(const std::string&)>& replicated) {
  NoGradGuard no_grad;
  const bool copy_here = pipe_.is_last() && !pipe_.is_first();
  std::vector<Tensor> grads;
  double sumsq = 0;
  for (auto& [local, p] : pipe_.stage_module().named_parameters()) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    grads.push_back(g);
    const bool counted = !(copy_here && p.is_same(tied_)) && (tensor.rank() == 0 || !replicated(pipe_.global_name(local)));
    if (counted) sumsq += (g * g).to(kFloat64).sum().item<double>();
  }
  const Device comm = pipe_.process_group().backend() == "nccl" ? pipe_.options().device : kCPU;
  Tensor s = full({1}, sumsq, dtype(kFloat64)).to(comm);
  pipe_.process_group().allreduce(s)->wait();
  tensor.allreduce(s)->wait();
  const double total = std::sqrt(s.to(kCPU).item<double>());
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1 || std::isnan(coef))
    for (Tensor& g : grads) g.mul_(coef);
  return total;
}

double TiedHead::divergence() {
  double d = 0;
  if (ends_ && ends_->size() == 2) {
    Tensor other = pipe_.is_first() ? tied_.detach().clone() : zeros_like(tied_);
    ends_->broadcast(other, 0)->wait();
    if (pipe_.is_last()) d = (tied_.detach() - other).abs().max().item<double>();
  }
  const Device comm = pipe_.process_group().backend() == "nccl" ? pipe_.options().device : kCPU;
  Tensor all = full({1}, d, dtype(kFloat64)).to(comm);
  pipe_.process_group().allreduce(all, dist::ReduceOp::kMax)->wait();
  return all.to(kCPU).item<double>();
}

}  // namespace kiln::train::gpt
