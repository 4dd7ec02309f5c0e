// ZeroRedundancyOptimizer: construction (groups -> buckets -> shards -> the wrapped optimizer),
// step, clipping. Its consolidated state lives in zero_state.cc.
#include "distributed/data_parallel/zero.h"

#include <unordered_map>

#include "core/error.h"
#include "core/ops.h"
#include "distributed/data_parallel/clip_grad_norm.h"

namespace kiln::dist {

struct ZeroRedundancyOptimizer::Parts {
  std::shared_ptr<ProcessGroup> pg;
  std::shared_ptr<ZeroReducer> reducer;
  std::unique_ptr<optim::Optimizer> inner;
  std::vector<size_t> bucket_at;
  std::vector<int64_t> global_index;
  std::vector<int64_t> group_sizes;
};

ZeroRedundancyOptimizer::Parts ZeroRedundancyOptimizer::build(DistributedDataParallel& ddp,
                                                               std::vector<optim::ParamGroup> groups,
                                                               const OptimizerFactory& make) {
  KILN_CHECK(make != nullptr, "ZeroRedundancyOptimizer: the optimizer factory is empty");
  Parts parts;
  parts.pg = ddp.shared_process_group();
  const auto& trained = ddp.trained_parameters();
  // Each trained parameter's group and index in the unsharded optimizer.
  std::unordered_map<const TensorImpl*, std::pair<int, int64_t>> place;
  int64_t index = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    parts.group_sizes.push_back(static_cast<int64_t>(groups[g].params.size()));
    for (const Tensor& p : groups[g].params) {
      KILN_CHECK(p.defined(), "ZeroRedundancyOptimizer: group {} holds an undefined tensor", g);
      KILN_CHECK(place.emplace(p.unsafe_impl(), std::make_pair(static_cast<int>(g), index++)).second,
                 "ZeroRedundancyOptimizer: a parameter of shape {} appears more than once in the groups", p.shape_str());
    }
  }
  std::vector<std::string> names;
  std::vector<Tensor> params;
  std::vector<int> group_of;
  for (const auto& [name, p] : trained) {
    auto it = place.find(p.unsafe_impl());
    KILN_CHECK(it != place.end(), "ZeroRedundancyOptimizer: parameter '{}' is trained by DDP but in no group", name);
    names.push_back(name);
    params.push_back(p);
    group_of.push_back(it->second.first);
    parts.global_index.push_back(it->second.second);
  }
  KILN_CHECK(static_cast<int64_t>(params.size()) == index,
             "ZeroRedundancyOptimizer: the groups hold {} tensors, but the model trains {} parameters (every group "
             "member must be a parameter of the DDP model that requires a gradient)", index, params.size());
  parts.reducer = ZeroReducer::create(std::move(names), std::move(params), std::move(group_of), parts.pg,
                                      reducer_options(ddp.options()));

  std::vector<optim::ParamGroup> shard_groups;
  for (size_t g = 0; g < groups.size(); ++g) {
    optim::ParamGroup sg({}, groups[g].options);
    const auto& buckets = parts.reducer->buckets();
    for (size_t b = 0; b < buckets.size(); ++b)
      if (buckets[b].group == static_cast<int>(g)) {
        sg.params.push_back(parts.reducer->shards()[b].shard);
        parts.bucket_at.push_back(b);
      }
    shard_groups.push_back(std::move(sg));
  }
  parts.inner = make(std::move(shard_groups));
  KILN_CHECK(parts.inner != nullptr, "ZeroRedundancyOptimizer: the optimizer factory returned null");
  ddp.set_gradient_reducer(parts.reducer);
  return parts;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(DistributedDataParallel& ddp, const OptimizerFactory& make)
    : ZeroRedundancyOptimizer(ddp, [&] {
        std::vector<Tensor> all;
        for (const auto& [name, p] : ddp.trained_parameters()) all.push_back(p);
        return std::vector<optim::ParamGroup>{optim::ParamGroup(std::move(all))};
      }(), make) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(DistributedDataParallel& ddp, std::vector<optim::ParamGroup> groups,
                                                 const OptimizerFactory& make)
    : ZeroRedundancyOptimizer(ddp, build(ddp, std::move(groups), make)) {}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(DistributedDataParallel&, Parts parts)
    : optim::Optimizer("ZeroRedundancyOptimizer(" + parts.inner->name() + ")", parts.inner->param_groups(),
                       parts.inner->defaults()),
      pg_(std::move(parts.pg)),
      reducer_(std::move(parts.reducer)),
      inner_(std::move(parts.inner)),
      bucket_at_(std::move(parts.bucket_at)),
      global_index_(std::move(parts.global_index)),
      group_sizes_(std::move(parts.group_sizes)) {
  take_inner_options();
}

void ZeroRedundancyOptimizer::take_inner_options() {
  for (size_t g = 0; g < param_groups().size(); ++g) param_groups()[g].options = inner_->param_groups()[g].options;
}

void ZeroRedundancyOptimizer::step() {
  for (size_t g = 0; g < param_groups().size(); ++g) inner_->param_groups()[g].options = param_groups()[g].options;
  reducer_->refresh_shards();  // parameters changed by anything but this optimizer (a loaded model) win
  inner_->step();
  reducer_->gather_parameters();
}

double ZeroRedundancyOptimizer::clip_grad_norm_(double max_norm, double norm_type) {
  return dist::clip_grad_norm_(shards(), max_norm, *pg_, norm_type);
}

std::vector<Tensor> ZeroRedundancyOptimizer::shards() const {
  std::vector<Tensor> out;
  for (const ZeroShard& s : reducer_->shards()) out.push_back(s.shard);
  return out;
}

int64_t ZeroRedundancyOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (int64_t i = 0; i < inner_->num_params(); ++i) {
    for (const auto& [name, t] : inner_->state(i)) bytes += t.numel() * static_cast<int64_t>(t.element_size());
    const Tensor& m = inner_->master(i);
    if (m.defined()) bytes += m.numel() * static_cast<int64_t>(m.element_size());
  }
  return bytes;
}

optim::StateDict ZeroRedundancyOptimizer::state_dict() const {
  fail("{}.state_dict: this rank holds only its shard of the optimizer state; use consolidated_state_dict() "
       "(a collective) or shard_state_dict(), or save with dist::save_zero_checkpoint", name());
}

void ZeroRedundancyOptimizer::load_state_dict(const optim::StateDict&) {
  fail("{}.load_state_dict: the optimizer state is sharded; use load_consolidated_state_dict() or "
       "load_shard_state_dict(), or load with dist::load_zero_checkpoint", name());
}

void ZeroRedundancyOptimizer::load_shard_state_dict(const optim::StateDict& state) {
  inner_->load_state_dict(state);
  take_inner_options();
}

}  // namespace kiln::dist
