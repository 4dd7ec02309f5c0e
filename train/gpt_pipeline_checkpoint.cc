// The pipelined GPT's merged checkpoints with optimizer state; see gpt_pipeline_checkpoint.h.
#include "train/gpt_pipeline_checkpoint.h"

#include <fmt/ranges.h>

#include <bit>
#include <functional>
#include <map>
#include <set>

#include "core/error.h"
#include "train/gpt_pipeline.h"
#include "train/pipeline_checkpoint.h"
#include "distributed/backend/init.h"
#include "models/gpt_tensor_parallel.h"

namespace kiln::train::gpt {
using namespace models::gpt;
namespace {

// TrainingState::extra key of every stage's generator: "step=<s> split=<boundaries> rng=<seed>:<offset>;...".
constexpr const char* kStageRngs = "pipeline_rngs";

// "<prefix><index>[.<field>]" -> index and field ("" when none); false for another prefix.
bool split_key(const std::string& key, const std::string& prefix, int64_t& index, std::string& field) {
  if (key.rfind(prefix, 0) != 0) return false;
  const size_t dot = key.find('.', prefix.size());
  index = std::stoll(key.substr(prefix.size(), dot - prefix.size()));
  field = dot == std::string::npos ? "" : key.substr(dot);  // with its dot
  return true;
}

Tensor indices(const std::vector<int64_t>& v) { return tensor<int64_t>(v, {static_cast<int64_t>(v.size())}); }

// `in` with each group's index list replaced by `groups`' and each per-parameter key
// ("state.<i>.<field>", "master.<i>") copied to the indices `to(i)` gives (none: left out).
optim::StateDict remap(const optim::StateDict& in, const std::vector<std::vector<int64_t>>& groups,
                       const std::function<std::vector<int64_t>(int64_t)>& to) {
  optim::StateDict out;
  int64_t i = 0;
  std::string field;
  for (const auto& [key, t] : in) {
    if (split_key(key, "param_groups.", i, field)) {
      out[key] = field == ".params" ? indices(groups.at(static_cast<size_t>(i))) : t;
      continue;
    }
    const std::string prefix = key.rfind("state.", 0) == 0 ? "state." : "master.";
    KILN_CHECK(split_key(key, prefix, i, field), "StageOptimizerMap: unexpected optimizer key '{}'", key);
    for (int64_t j : to(i)) out[prefix + std::to_string(j) + field] = t;
  }
  return out;
}

std::string rng_tag(dist::Pipeline& pipe, int64_t step) {
  return fmt::format("step={} split={} rng=", step, fmt::join(pipe.boundaries(), ","));
}

}  // namespace

std::vector<std::vector<std::string>> optimizer_layout(const TrainConfig& c, const nn::NamedTensors& named) {
  std::vector<std::vector<std::string>> out;
  for (const optim::ParamGroup& g : param_groups(c, named)) {
    out.emplace_back();
    for (const Tensor& p : g.params)
      for (const auto& [name, q] : named)
        if (q.is_same(p)) out.back().push_back(name);
  }
  return out;
}

StageOptimizerMap::StageOptimizerMap(const std::vector<std::vector<std::string>>& whole,
                                     const std::vector<std::vector<std::string>>& stage) {
  KILN_CHECK(whole.size() == stage.size(), "StageOptimizerMap: {} parameter groups in one process, {} on the stage",
             whole.size(), stage.size());
  std::map<std::string, int64_t> index;
  int64_t n = 0;
  for (const auto& group : whole) {
    whole_groups_.emplace_back();
    for (const std::string& name : group) whole_groups_.back().push_back(index[name] = n++);
  }
  n = 0;
  for (const auto& group : stage) {
    stage_groups_.emplace_back();
    for (const std::string& name : group) {
      const bool copy = name == kHeadCopy;
      const auto it = index.find(copy ? "wte.weight" : name);
      KILN_CHECK(it != index.end(), "StageOptimizerMap: the stage's '{}' is not a parameter of the GPT", name);
      whole_index_.push_back(it->second);
      copy_.push_back(copy);
      stage_groups_.back().push_back(n++);
    }
  }
}

optim::StateDict StageOptimizerMap::to_whole(const optim::StateDict& stage) const {
  return remap(stage, whole_groups_, [&](int64_t i) {
    const auto j = static_cast<size_t>(i);
    return copy_.at(j) ? std::vector<int64_t>{} : std::vector<int64_t>{whole_index_[j]};
  });
}

optim::StateDict StageOptimizerMap::to_stage(const optim::StateDict& whole) const {
  return remap(whole, stage_groups_, [&](int64_t i) {
    std::vector<int64_t> local;  // the head's copy shares wte's index
    for (size_t j = 0; j < whole_index_.size(); ++j)
      if (whole_index_[j] == i) local.push_back(static_cast<int64_t>(j));
    return local;
  });
}

void save_pipeline_checkpoint(dist::Pipeline& pipe, const std::string& path, const StageOptimizerMap& map,
                              const optim::Optimizer& opt, train::TrainingState state) {
  const GeneratorState mine = default_generator().state();
  state.rng = mine;  // stage 0's is the one written (and what a one-process resume takes)
  const int p = pipe.num_stages(), s = pipe.stage();
  std::vector<int64_t> all(static_cast<size_t>(2 * p), 0);
  all[static_cast<size_t>(2 * s)] = std::bit_cast<int64_t>(mine.seed);
  all[static_cast<size_t>(2 * s + 1)] = std::bit_cast<int64_t>(mine.offset);
  const Device comm = pipe.process_group().backend() == "nccl" ? pipe.options().device : kCPU;
  Tensor t = indices(all).to(comm);
  pipe.process_group().allreduce(t)->wait();
  all = t.to(kCPU).to_vector<int64_t>();
  std::vector<std::string> rngs;
  for (int k = 0; k < p; ++k)
    rngs.push_back(fmt::format("{}:{}", std::bit_cast<uint64_t>(all[static_cast<size_t>(2 * k)]),
                               std::bit_cast<uint64_t>(all[static_cast<size_t>(2 * k + 1)])));
  state.extra[kStageRngs] = rng_tag(pipe, state.step) + fmt::format("{}", fmt::join(rngs, ";"));
  const int64_t n_layer = pipe.boundaries().back() - 2;
  dist::save_merged_checkpoint(pipe, path, state, [&](const std::string& global) { return gpt_name(global, n_layer); },
                               map.to_whole(opt.state_dict()), opt.name());
}

void save_tensor_parallel_pipeline_checkpoint(dist::Pipeline& pipe, const dist::ParallelGroups& groups,
                                              const std::string& path, const TrainConfig& c,
                                              const std::vector<std::pair<std::string, Shape>>& whole_shapes,
                                              const std::vector<std::vector<std::string>>& whole_layout,
                                              const StageOptimizerMap& map,
                                              const std::vector<std::string>& stage_names,
                                              const optim::Optimizer& opt, const train::TrainingState& state) {
  const dist::ParallelCoords& at = groups.coords;
  auto gpt_of = [](const std::string& name) { return name == kHeadCopy ? std::string("wte.weight") : name; };
  if (at.data == 0) {  // the replicas are equal
    dist::ProcessGroup& tensor = *groups.tensor;
    nn::StateDict weights;  // this stage's, whole, by the GPT's names
    for (const auto& [local, p] : pipe.stage_module().named_parameters()) {
      const std::string name = gpt_name(pipe.global_name(local), c.gpt.n_layer);
      if (!name.empty()) weights[name] = models::gpt::whole_of(name, p, tensor);
    }
    optim::StateDict stage = opt.state_dict();  // the same keys on every tensor rank of the stage
    std::set<std::string> fields;
    int64_t j = 0;
    std::string field;
    for (auto& [key, t] : stage) {
      if (!split_key(key, "state.", j, field)) continue;
      fields.insert(field.substr(1));  // without its dot
      if (t.dim() > 0) t = models::gpt::whole_of(gpt_of(stage_names.at(static_cast<size_t>(j))), t, tensor);
    }
    const optim::StateDict stage_whole = map.to_whole(stage);
    if (at.tensor == 0) {
      // Which stage holds each parameter (any split, interleaved included); stage 0 collects.
      dist::ProcessGroup& line = *groups.pipeline;
      const Device comm = line.backend() == "nccl" ? pipe.options().device : kCPU;
      std::vector<int64_t> owner(whole_shapes.size(), 0);
      for (size_t i = 0; i < whole_shapes.size(); ++i)
        if (weights.count(whole_shapes[i].first)) owner[i] = pipe.stage() + 1;
      Tensor o = indices(owner).to(comm);
      line.allreduce(o)->wait();
      owner = o.to(kCPU).to_vector<int64_t>();
      auto collect = [&](const Tensor* mine, const Shape& shape, DType dtype, int64_t from) {
        Tensor t = mine ? mine->detach().reshape(shape).contiguous().to(comm)
                        : empty(shape, TensorOptions().dtype(dtype).device(comm));
        line.broadcast(t, static_cast<int>(from - 1))->wait();
        return t.to(kCPU);
      };
      std::map<std::string, int64_t> index;  // the one-process optimizer's index of each parameter
      for (const auto& group : whole_layout)
        for (const std::string& name : group) index.emplace(name, static_cast<int64_t>(index.size()));
      nn::StateDict merged;
      optim::StateDict merged_opt;
      for (const auto& [key, t] : stage_whole)
        if (key.starts_with("param_groups.")) merged_opt[key] = t;
      for (size_t i = 0; i < whole_shapes.size(); ++i) {
        const auto& [name, shape] = whole_shapes[i];
        KILN_CHECK(owner[i] > 0, "3D checkpoint: no stage holds '{}'", name);
        merged[name] = collect(owner[i] == pipe.stage() + 1 ? &weights.at(name) : nullptr, shape, kFloat32, owner[i]);
      }
      for (const std::string& f : fields)  // every stage's optimizer has the same fields
        for (size_t i = 0; i < whole_shapes.size(); ++i) {
          const auto& [name, shape] = whole_shapes[i];
          const std::string key = fmt::format("state.{}.{}", index.at(name), f);
          const Tensor* mine = nullptr;
          if (owner[i] == pipe.stage() + 1) {
            auto it = stage_whole.find(key);
            KILN_CHECK(it != stage_whole.end(), "3D checkpoint: stage {} has no '{}' for '{}'", pipe.stage(), f, name);
            mine = &it->second;
          }
          const bool scalar = f == "step";  // a 0-dim f64, moved as [1]
          Tensor t = collect(mine, scalar ? Shape{1} : shape, scalar ? kFloat64 : kFloat32, owner[i]);
          merged_opt[key] = scalar ? t.reshape({}) : t;
        }
      if (pipe.stage() == 0) {
        const GeneratorState g = default_generator().state();  // a GPT draws its initial weights
        GPT whole(c.gpt);
        default_generator().set_state(g);
        whole.load_state_dict(merged);
        train::save_checkpoint(path, whole, merged_opt, opt.name(), state);
      }
    }
  }
  dist::default_group()->barrier()->wait();
}

optim::StateDict tensor_parallel_stage_state(const optim::StateDict& stage_whole,
                                             const std::vector<std::string>& stage_names,
                                             const dist::ProcessGroup& tensor) {
  optim::StateDict out = stage_whole;
  int64_t j = 0;
  std::string field;
  for (auto& [key, t] : out)
    if (split_key(key, "state.", j, field) && t.dim() > 0) {
      const std::string& name = stage_names.at(static_cast<size_t>(j));
      t = models::gpt::shard_of(name == kHeadCopy ? "wte.weight" : name, t, tensor);
    }
  return out;
}

train::TrainingState load_whole_checkpoint(const TrainConfig& c, const std::string& path, GPT& model,
                                        optim::StateDict& whole_optimizer) {
  auto opt = make_optimizer(c, model.named_parameters());
  train::TrainingState state = train::load_checkpoint(path, model, opt.get());
  whole_optimizer = opt->state_dict();
  return state;
}

void restore_stage_generator(dist::Pipeline& pipe, const train::TrainingState& state) {
  const auto it = state.extra.find(kStageRngs);
  const std::string tag = rng_tag(pipe, state.step);
  // Another split, or a tag carried over from an older save: stage 0's generator stands.
  if (it == state.extra.end() || it->second.rfind(tag, 0) != 0) return;
  std::string rest = it->second.substr(tag.size());
  for (int k = 0; k < pipe.stage(); ++k) rest = rest.substr(rest.find(';') + 1);
  const size_t colon = rest.find(':');
  default_generator().set_state({.seed = std::stoull(rest.substr(0, colon)), .offset = std::stoull(rest.substr(colon + 1))});
}

}  // namespace kiln::train::gpt
