// The sharded GPT's optimizer, clipping and its state in the one-process trainer's terms (see
// gpt_sharded.h). The pivot between the layouts is "by name, in the tensor-parallel shard's
// shape": FSDP's flat shards are cut into it (gather_by_name / shard_by_name) and the tensor
// split is undone or applied per name (whole_of / shard_of).
#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "train/gpt_pipeline_checkpoint.h"
#include "train/gpt_sharded.h"

namespace kiln::train::gpt {
namespace {

using models::gpt::parameter_split;

Tensor to_whole(ShardedGPT& m, const std::string& name, const Tensor& local) {
  return m.tp ? models::gpt::whole_of(name, local, *m.groups.tensor) : local.detach().clone();
}

Tensor to_local(ShardedGPT& m, const std::string& name, const Tensor& whole) {
  return m.tp ? models::gpt::shard_of(name, whole, *m.groups.tensor) : whole.detach().clone();
}

/// "state.<i>.<field>" -> (i, field); false for other keys.
bool state_key(const std::string& key, int64_t& index, std::string& field) {
  if (!key.starts_with("state.")) return false;
  const size_t dot = key.find('.', 6);
  KILN_CHECK(dot != std::string::npos, "sharded GPT: malformed optimizer key '{}'", key);
  index = std::stoll(key.substr(6, dot - 6));
  field = key.substr(dot + 1);
  return true;
}

void check_key(const std::string& key) {
  KILN_CHECK(key.starts_with("state.") || key.starts_with("param_groups."),
             "sharded GPT: optimizer key '{}' is not supported (AdamW's moments and step only; no master weights)", key);
}

std::map<std::string, int64_t> whole_index(const ShardedGPT& m) {
  std::map<std::string, int64_t> index;
  int64_t n = 0;
  for (const auto& group : m.layout)
    for (const std::string& name : group) index[name] = n++;
  return index;
}

}  // namespace

nn::Module& ShardedGPT::model() { return tp ? static_cast<nn::Module&>(*tp) : static_cast<nn::Module&>(*whole); }

nn::Module& ShardedGPT::net() {
  if (fsdp) return *fsdp;
  if (ddp) return *ddp;
  return model();
}

Tensor ShardedGPT::loss(const Tensor& logits, const Tensor& targets) const {
  return tp ? tp->loss(logits, targets) : GPT::loss(logits, targets);
}

ShardedAdamW::ShardedAdamW(std::vector<Tensor> shards, std::vector<Tensor> decay_masks, optim::AdamOptions options,
                           double weight_decay)
    : optim::AdamW(std::vector<optim::ParamGroup>{{shards, {{"weight_decay", 0.0}}}}, options),
      shards_(std::move(shards)), weight_decay_(weight_decay) {
  KILN_CHECK(decay_masks.size() == shards_.size(), "ShardedAdamW: {} decay masks for {} shards", decay_masks.size(),
             shards_.size());
  for (const Tensor& mask : decay_masks) {
    const std::vector<float> v = mask.to(kCPU).to(kFloat32).contiguous().to_vector<float>();
    std::vector<std::pair<int64_t, int64_t>> runs;
    for (int64_t i = 0, n = static_cast<int64_t>(v.size()); i < n;) {
      KILN_CHECK(v[i] == 0 || v[i] == 1, "ShardedAdamW: decay mask value {} at {} is neither 0 nor 1", v[i], i);
      int64_t j = i;
      while (j < n && v[j] == v[i]) ++j;
      if (v[i] == 1) runs.emplace_back(i, j - i);
      i = j;
    }
    decayed_.push_back(std::move(runs));
  }
}

void ShardedAdamW::step() {
  const double factor = 1 - param_groups()[0].get("lr") * weight_decay_;
  if (weight_decay_ != 0) {
    NoGradGuard no_grad;
    for (size_t i = 0; i < shards_.size(); ++i)
      if (shards_[i].grad().defined())
        for (const auto& [offset, length] : decayed_[i]) shards_[i].detach().narrow(0, offset, length).mul_(Scalar(factor));
  }
  optim::AdamW::step();
}

std::unique_ptr<optim::Optimizer> make_sharded_optimizer(const TrainConfig& c, ShardedGPT& m) {
  if (!m.fsdp) {
    const nn::NamedTensors named = m.model().named_parameters();
    m.opt_names.clear();
    for (const auto& group : optimizer_layout(c, named))
      for (const std::string& name : group) m.opt_names.push_back(name);
    return make_optimizer(c, named);
  }
  std::map<std::string, int64_t> dims;
  for (const auto& [name, p] : m.model().named_parameters()) dims[name] = p.dim();
  const std::vector<Tensor> decay =
      m.fsdp->shard_masks([&](const std::string& name) { return weight_decayed(name, dims.at(name)) ? 1.0 : 0.0; });
  if (m.tp && m.groups.coords.tensor != 0)  // replicated parameters: rank 0 of the tensor group counts them
    m.norm_masks = m.fsdp->shard_masks([](const std::string& name) { return parameter_split(name).dim >= 0 ? 1.0 : 0.0; });
  return std::make_unique<ShardedAdamW>(m.fsdp->shards(), decay, adam_options(c), c.weight_decay);
}

double clip_sharded_grad_norm(ShardedGPT& m, double max_norm) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  double sumsq = 0;
  if (m.fsdp) {
    const std::vector<Tensor> shards = m.fsdp->shards();
    for (size_t u = 0; u < shards.size(); ++u) {
      const Tensor g = shards[u].grad();
      if (!g.defined()) continue;
      grads.push_back(g);
      Tensor sq = g * g;
      if (!m.norm_masks.empty()) sq = sq * m.norm_masks[u];
      sumsq += sq.to(kFloat64).sum().item<double>();
    }
  } else {
    const bool skip_replicated = m.tp && m.groups.coords.tensor != 0;
    for (const auto& [name, p] : m.model().named_parameters()) {
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      grads.push_back(g);
      if (!(skip_replicated && parameter_split(name).dim < 0)) sumsq += (g * g).to(kFloat64).sum().item<double>();
    }
  }
  Tensor s = full({1}, sumsq, TensorOptions().dtype(kFloat64)).to(m.comm);
  if (m.tp) m.groups.tensor->allreduce(s)->wait();
  if (m.fsdp) m.fsdp->process_group().allreduce(s)->wait();  // the shard group: HSDP's replicas hold the same
  const double total = std::sqrt(s.to(kCPU).item<double>());
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1)
    for (Tensor& g : grads) g.mul_(coef);
  return total;
}

nn::StateDict whole_weights(ShardedGPT& m) {
  NoGradGuard no_grad;
  nn::StateDict local;
  if (m.fsdp) local = m.fsdp->gather_by_name(m.fsdp->shards());
  else
    for (const auto& [name, p] : m.model().named_parameters()) local[name] = p.detach();
  nn::StateDict out;
  for (const std::string& name : m.names) {
    auto it = local.find(name);
    KILN_CHECK(it != local.end(), "sharded GPT: the model has no parameter '{}'", name);
    out[name] = to_whole(m, name, it->second);
  }
  return out;
}

optim::StateDict whole_optimizer_state(ShardedGPT& m, const optim::Optimizer& opt) {
  const std::map<std::string, int64_t> index = whole_index(m);
  const optim::StateDict local = opt.state_dict();
  optim::StateDict out = m.whole_groups;
  int64_t i = 0;
  std::string field;
  if (!m.fsdp) {
    for (const auto& [key, t] : local) {  // the same keys in the same order on every rank
      check_key(key);
      if (!state_key(key, i, field)) continue;
      const std::string& name = m.opt_names.at(static_cast<size_t>(i));
      out[fmt::format("state.{}.{}", index.at(name), field)] = t.dim() > 0 ? to_whole(m, name, t) : t.clone();
    }
    return out;
  }
  const auto units = m.fsdp->units();
  std::map<std::string, std::vector<Tensor>> fields;  // field -> one tensor per unit
  for (const auto& [key, t] : local) {
    check_key(key);
    if (!state_key(key, i, field)) continue;
    auto& v = fields[field];
    v.resize(units.size());
    v.at(static_cast<size_t>(i)) = t;
  }
  for (auto& [f, per_unit] : fields) {
    for (size_t u = 0; u < units.size(); ++u)
      KILN_CHECK(per_unit[u].defined(), "sharded GPT: the optimizer has no '{}' for unit '{}'", f, units[u].path);
    if (per_unit[0].dim() > 0) {
      const nn::StateDict by_name = m.fsdp->gather_by_name(per_unit);
      for (const std::string& name : m.names)
        out[fmt::format("state.{}.{}", index.at(name), f)] = to_whole(m, name, by_name.at(name));
    } else {
      for (size_t u = 0; u < units.size(); ++u)
        for (const std::string& name : units[u].names)
          out[fmt::format("state.{}.{}", index.at(name), f)] = per_unit[u].clone();
    }
  }
  return out;
}

optim::StateDict local_optimizer_state(ShardedGPT& m, const optim::StateDict& whole, const optim::Optimizer& opt) {
  const std::map<std::string, int64_t> index = whole_index(m);
  std::map<int64_t, std::map<std::string, Tensor>> by_index;  // the one-process index -> field -> state
  std::set<std::string> fields;
  int64_t i = 0;
  std::string field;
  for (const auto& [key, t] : whole) {
    check_key(key);
    if (state_key(key, i, field)) by_index[i][field] = t, fields.insert(field);
  }
  optim::StateDict out;
  for (const auto& [key, t] : opt.state_dict())
    if (key.starts_with("param_groups.")) out[key] = t;  // this optimizer's own groups
  if (!m.fsdp) {
    for (size_t j = 0; j < m.opt_names.size(); ++j) {
      const std::string& name = m.opt_names[j];
      for (const auto& [f, t] : by_index[index.at(name)])
        out[fmt::format("state.{}.{}", j, f)] = t.dim() > 0 ? to_local(m, name, t) : t.clone();
    }
    return out;
  }
  const auto units = m.fsdp->units();
  for (const std::string& f : fields) {
    nn::StateDict by_name;
    for (const std::string& name : m.names) {
      auto it = by_index[index.at(name)].find(f);
      KILN_CHECK(it != by_index[index.at(name)].end(), "sharded GPT: the checkpoint's optimizer state has no '{}' for '{}'",
                 f, name);
      by_name[name] = it->second;
    }
    if (by_name.at(m.names[0]).dim() > 0) {
      for (auto& [name, t] : by_name) t = to_local(m, name, t);
      const std::vector<Tensor> shards = m.fsdp->shard_by_name(by_name);
      for (size_t u = 0; u < units.size(); ++u) out[fmt::format("state.{}.{}", u, f)] = shards[u];
    } else {
      for (size_t u = 0; u < units.size(); ++u) out[fmt::format("state.{}.{}", u, f)] = by_name.at(units[u].names.at(0)).clone();
    }
  }
  return out;
}

}  // namespace kiln::train::gpt
