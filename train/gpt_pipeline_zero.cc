// ZeRO-2/3 over a pipeline stage's data-parallel group; see gpt_pipeline_zero.h.
#include "train/gpt_pipeline_zero.h"

#include <cmath>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"

namespace kiln::train::gpt {
namespace {

// "state.<index>.<field>" -> index and field; false for another key.
bool state_key(const std::string& key, int64_t& index, std::string& field) {
  if (!key.starts_with("state.")) return false;
  const size_t dot = key.find('.', 6);
  if (dot == std::string::npos) return false;
  index = std::stoll(key.substr(6, dot - 6));
  field = key.substr(dot + 1);
  return true;
}

}  // namespace

ShardedStage::ShardedStage(const TrainConfig& c, const nn::NamedTensors& named,
                           std::shared_ptr<dist::ProcessGroup> data, Device comm)
    : data_(std::move(data)), comm_(comm), zero_(c.zero) {
  KILN_CHECK(zero_ == 2 || zero_ == 3, "pipeline ZeRO: --zero {}: the stages shard with 2 or 3", zero_);
  const int n = data_->size(), rank = data_->rank();
  NoGradGuard no_grad;
  for (const auto& [name, p] : named) {
    KILN_CHECK(p.dtype() == kFloat32 && p.is_contiguous(),
               "pipeline ZeRO: parameter '{}' is {} {}; the stages shard f32 contiguous parameters (compute in "
               "bf16/f16 under --amp)", name, p.dtype(), p.is_contiguous() ? "contiguous" : "non-contiguous");
    Param q;
    q.name = name;
    q.whole = p;
    q.chunk = std::max<int64_t>(1, (p.numel() + n - 1) / n);
    q.offset = per_rank_;
    per_rank_ += q.chunk;
    Tensor flat = zeros({q.chunk * n}, TensorOptions().device(p.device()));
    flat.narrow(0, 0, p.numel()).copy_(p.reshape({-1}));
    q.shard = flat.narrow(0, rank * q.chunk, q.chunk).clone().requires_grad_();
    q.freeable = p.offset() == 0 && p.storage()->nbytes() == static_cast<size_t>(p.numel()) * p.element_size();
    params_.push_back(std::move(q));
  }
  // make_optimizer's groups and index order: the decayed matrices, then the rest.
  std::vector<Tensor> decay, no_decay;
  std::vector<size_t> rest;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (weight_decayed(params_[i].name, params_[i].whole.dim())) {
      decay.push_back(params_[i].shard);
      by_index_.push_back(i);
    } else {
      no_decay.push_back(params_[i].shard);
      rest.push_back(i);
    }
  }
  by_index_.insert(by_index_.end(), rest.begin(), rest.end());
  opt_ = std::make_unique<optim::AdamW>(
      std::vector<optim::ParamGroup>{{decay, {{"weight_decay", c.weight_decay}}}, {no_decay, {{"weight_decay", 0.0}}}},
      adam_options(c));
  if (zero_ == 3) release();
}

void ShardedStage::release() {
  for (Param& q : params_)
    if (q.freeable) q.whole.storage()->resize_(0);
  released_ = true;
  current_ = false;
}

void ShardedStage::gather() {
  if (current_) return;
  NoGradGuard no_grad;
  const int n = data_->size();
  std::vector<Tensor> mine;
  for (const Param& q : params_) mine.push_back(q.shard.detach());
  Tensor local = cat(mine).to(comm_);
  Tensor all = zeros({per_rank_ * n}, TensorOptions().device(comm_));
  data_->allgather_into_tensor(all, local)->wait();
  const Tensor rows = all.reshape({n, per_rank_});  // row d: rank d's chunks back to back
  for (Param& q : params_) {
    if (released_ && q.freeable) q.whole.storage()->resize_(static_cast<size_t>(q.whole.numel()) * q.whole.element_size());
    const Tensor v = rows.narrow(1, q.offset, q.chunk).reshape({-1}).narrow(0, 0, q.whole.numel());
    q.whole.copy_(v.reshape(q.whole.sizes()).to(q.whole.device()));
  }
  released_ = false;
  current_ = true;
}

void ShardedStage::reduce_scatter() {
  NoGradGuard no_grad;
  const int n = data_->size();
  // Row d: rank d's chunks back to back. Each whole gradient is freed once copied in (until the
  // next step's backward), so the peak holds about one copy of the stage's gradients.
  Tensor input = zeros({n, per_rank_}, TensorOptions().device(comm_));
  for (Param& q : params_) {
    const Tensor g = q.whole.grad();
    if (!g.defined()) continue;
    Tensor flat = g.reshape({-1}).to(comm_);
    if (flat.numel() != q.chunk * n) {  // zero-padded to n chunks
      Tensor padded = zeros({q.chunk * n}, TensorOptions().device(comm_));
      padded.narrow(0, 0, flat.numel()).copy_(flat);
      flat = padded;
    }
    input.narrow(1, q.offset, q.chunk).copy_(flat.reshape({n, q.chunk}));
    q.whole.set_grad(Tensor());
  }
  Tensor out = zeros({per_rank_}, TensorOptions().device(comm_));
  data_->reduce_scatter_tensor(out, input.reshape({-1}))->wait();
  input = Tensor();
  out.mul_(1.0 / n);
  for (Param& q : params_) q.shard.set_grad(out.narrow(0, q.offset, q.chunk).to(q.shard.device()));
}

double ShardedStage::clip_grad_norm(double max_norm, const std::vector<bool>& counted,
                                    const std::vector<dist::ProcessGroup*>& groups) {
  KILN_CHECK(counted.size() == params_.size(), "pipeline ZeRO: {} counted flags for {} parameters", counted.size(),
             params_.size());
  NoGradGuard no_grad;
  double sumsq = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].shard.grad();
    if (counted[i] && g.defined()) sumsq += (g * g).to(kFloat64).sum().item<double>();
  }
  Tensor s = full({1}, sumsq, dtype(kFloat64)).to(comm_);
  data_->allreduce(s)->wait();
  for (dist::ProcessGroup* pg : groups) pg->allreduce(s)->wait();
  const double total = std::sqrt(s.to(kCPU).item<double>());
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1 || std::isnan(coef))
    for (Param& q : params_)
      if (Tensor g = q.shard.grad(); g.defined()) g.mul_(coef);
  return total;
}

void ShardedStage::after_step() {
  if (zero_ == 2) {
    current_ = false;
    gather();
  } else {
    release();
  }
}

optim::StateDict ShardedStage::whole_state() const {
  const int n = data_->size();
  optim::StateDict out;
  for (const auto& [key, v] : opt_->state_dict()) {  // the same keys, in the same order, on every data rank
    int64_t index = 0;
    std::string field;
    if (!state_key(key, index, field) || field == "step") {
      out[key] = v;
      continue;
    }
    const Param& q = params_.at(by_index_.at(static_cast<size_t>(index)));
    KILN_CHECK(v.numel() == q.chunk, "pipeline ZeRO: '{}' holds {} elements, the shard of '{}' {}", key, v.numel(),
               q.name, q.chunk);
    Tensor all = zeros({q.chunk * n}, TensorOptions().device(comm_));
    data_->allgather_into_tensor(all, v.reshape({-1}).to(kFloat32).to(comm_))->wait();
    out[key] = all.narrow(0, 0, q.whole.numel()).reshape(q.whole.sizes()).to(v.device()).to(v.dtype());
  }
  return out;
}

void ShardedStage::load_whole_state(const optim::StateDict& whole) {
  const int n = data_->size(), rank = data_->rank();
  optim::StateDict mine;
  for (const auto& [key, v] : whole) {
    int64_t index = 0;
    std::string field;
    if (!state_key(key, index, field) || field == "step") {
      mine[key] = v;
      continue;
    }
    KILN_CHECK(index >= 0 && static_cast<size_t>(index) < by_index_.size(),
               "pipeline ZeRO: the optimizer state's '{}' names parameter {} of the stage's {}", key, index,
               by_index_.size());
    const Param& q = params_[by_index_[static_cast<size_t>(index)]];
    KILN_CHECK(v.numel() == q.whole.numel(), "pipeline ZeRO: '{}' holds {} elements, parameter '{}' {}", key,
               v.numel(), q.name, q.whole.numel());
    Tensor flat = zeros({q.chunk * n}, TensorOptions().dtype(v.dtype()).device(v.device()));
    flat.narrow(0, 0, v.numel()).copy_(v.reshape({-1}));
    mine[key] = flat.narrow(0, rank * q.chunk, q.chunk).clone();
  }
  opt_->load_state_dict(mine);
}

int64_t ShardedStage::local_numel() const { return per_rank_; }

}  // namespace kiln::train::gpt
