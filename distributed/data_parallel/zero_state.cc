// ZeRO-1's consolidated optimizer state: the shards' state all-gathered into the layout of the
// unsharded optimizer (state.<i>.<name> shaped as parameter i), and such a state cut back into
// this rank's shard. Both sides go bucket by bucket: a bucket's flat padded buffer is the
// concatenation of its parameters, chunk r of it rank r's shard.
#include <map>
#include <set>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "distributed/data_parallel/zero.h"

namespace kiln::dist {
namespace {

std::string state_key(int64_t index, const std::string& name) {
  return "state." + std::to_string(index) + "." + name;
}

}  // namespace

optim::StateDict ZeroRedundancyOptimizer::consolidated_state_dict() {
  NoGradGuard no_grad;
  optim::StateDict out;
  int64_t first = 0;
  for (size_t g = 0; g < param_groups().size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    for (const auto& [key, value] : param_groups()[g].options) out[prefix + key] = scalar_tensor(value, kFloat64);
    std::vector<int64_t> indices(static_cast<size_t>(group_sizes_[g]));
    for (int64_t& i : indices) i = first++;
    out[prefix + "params"] = tensor<int64_t>(indices, {static_cast<int64_t>(indices.size())});
  }
  const int world = pg_->size();
  for (int64_t k = 0; k < inner_->num_params(); ++k) {
    const ReducerBucket& b = reducer_->buckets()[bucket_at_[k]];
    const int64_t shard_numel = reducer_->shards()[bucket_at_[k]].numel;
    // Every rank's shard of a bucket has stepped as often (its gradient is always defined), so
    // every rank walks the same names in the same order here. A master copy (f16/bf16 shards
    // under master weights) is gathered as one more field, "master.<i>" shaped as parameter i.
    std::map<std::string, Tensor> fields = inner_->state(k);
    if (inner_->master(k).defined()) fields[""] = inner_->master(k);
    for (const auto& [name, t] : fields) {
      Tensor full;
      if (t.dim() > 0) {
        full = empty({shard_numel * world}, TensorOptions().dtype(t.dtype()).device(t.device()));
        pg_->allgather_into_tensor(full, t.contiguous())->wait();
      }
      for (size_t s = 0; s < b.params.size(); ++s) {
        const size_t pi = b.params[s];
        const Tensor& p = reducer_->params()[pi];
        const std::string key = name.empty() ? "master." + std::to_string(global_index_[pi])
                                             : state_key(global_index_[pi], name);
        out[key] = t.dim() == 0 ? t.clone() : full.narrow(0, b.offsets[s], p.numel()).view(p.sizes()).clone();
      }
    }
  }
  return out;
}

void ZeroRedundancyOptimizer::load_consolidated_state_dict(const optim::StateDict& sd) {
  auto bad = [&](const std::string& what) { fail("{}.load_consolidated_state_dict: {}", name(), what); };
  NoGradGuard no_grad;
  optim::StateDict in;
  std::set<std::string> used;
  // Group options as saved; the parameter lists must describe these groups.
  int64_t inner_first = 0;
  for (size_t g = 0; g < param_groups().size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    auto it = sd.find(prefix + "params");
    if (it == sd.end()) bad(fmt::format("no key '{}params': the state has fewer groups than this optimizer's {}",
                                        prefix, param_groups().size()));
    if (it->second.numel() != group_sizes_[g])
      bad(fmt::format("group {} holds {} parameters in the state, {} here", g, it->second.numel(), group_sizes_[g]));
    used.insert(it->first);
    for (const auto& [key, t] : sd)
      if (key.rfind(prefix, 0) == 0 && key != prefix + "params") {
        in[key] = t;
        used.insert(key);
      }
    std::vector<int64_t> indices;
    for (const optim::ParamGroup& sg = inner_->param_groups()[g]; indices.size() < sg.params.size();)
      indices.push_back(inner_first++);
    in[prefix + "params"] = tensor<int64_t>(indices, {static_cast<int64_t>(indices.size())});
  }
  const int64_t rank = pg_->rank();
  const int world = pg_->size();
  for (int64_t k = 0; k < inner_->num_params(); ++k) {
    const ReducerBucket& b = reducer_->buckets()[bucket_at_[k]];
    const int64_t shard_numel = reducer_->shards()[bucket_at_[k]].numel;
    std::set<std::string> names;  // "" stands for the master copy
    for (size_t pi : b.params) {
      const std::string prefix = "state." + std::to_string(global_index_[pi]) + ".";
      for (auto it = sd.lower_bound(prefix); it != sd.end() && it->first.rfind(prefix, 0) == 0; ++it)
        names.insert(it->first.substr(prefix.size()));
      if (sd.count("master." + std::to_string(global_index_[pi]))) names.insert("");
    }
    for (const std::string& field : names) {
      auto key_of = [&](size_t pi) {
        return field.empty() ? "master." + std::to_string(global_index_[pi]) : state_key(global_index_[pi], field);
      };
      Tensor flat, step;
      for (size_t s = 0; s < b.params.size(); ++s) {
        const size_t pi = b.params[s];
        const Tensor& p = reducer_->params()[pi];
        const std::string key = key_of(pi);
        auto it = sd.find(key);
        if (it == sd.end())
          bad(fmt::format("'{}' (parameter '{}') is missing, but parameters sharing its bucket have '{}'", key,
                          reducer_->names()[pi], field.empty() ? "master copies" : field));
        used.insert(key);
        const Tensor& t = it->second;
        if (t.dim() == 0) {
          if (step.defined() && step.item<double>() != t.item<double>())
            bad(fmt::format("'{}' is {} but another parameter of its bucket has {}; ZeRO steps a bucket as one",
                            key, t.item<double>(), step.item<double>()));
          step = t;
          continue;
        }
        if (t.sizes() != p.sizes())
          bad(fmt::format("'{}' has shape {}, parameter '{}' has {}", key, t.shape_str(), reducer_->names()[pi],
                          p.shape_str()));
        if (!flat.defined()) flat = zeros({shard_numel * world}, dtype(t.dtype()));
        flat.narrow(0, b.offsets[s], p.numel()).copy_(t.reshape({-1}));
      }
      in[field.empty() ? "master." + std::to_string(k) : state_key(k, field)] =
          step.defined() ? step : flat.narrow(0, rank * shard_numel, shard_numel).clone();
    }
  }
  for (const auto& [key, t] : sd)
    if (!used.count(key)) bad(fmt::format("unexpected key '{}'", key));
  try {
    inner_->load_state_dict(in);
  } catch (const Error& e) {
    bad(e.what());
  }
  take_inner_options();
}

}  // namespace kiln::dist
