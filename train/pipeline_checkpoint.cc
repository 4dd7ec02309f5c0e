// Per-stage and merged pipeline checkpoints; see pipeline_checkpoint.h. Merging goes through the
// file system: each stage writes a part with global names, stage 0 joins them.
#include "train/pipeline_checkpoint.h"

#include <cstdio>
#include <exception>
#include <map>

#include "core/error.h"
#include "core/ops.h"
#include "train/distributed_checkpoint.h"
#include "nn/safetensors.h"

namespace kiln::dist {
namespace {

// A module holding tensors under arbitrary dotted names, so that train::save_checkpoint and
// train::load_checkpoint can write and validate a model this process does not have whole.
class TensorTree final : public nn::Module {
 public:
  TensorTree() : nn::Module("TensorTree") {}
  void put(const std::string& name, const Tensor& t) {
    size_t dot = name.find('.');
    if (dot == std::string::npos) {
      register_parameter(name, t, /*requires_grad=*/false);
      return;
    }
    auto& kid = kids_[name.substr(0, dot)];
    if (!kid) kid = register_module(name.substr(0, dot), std::make_shared<TensorTree>());
    kid->put(name.substr(dot + 1), t);
  }

 private:
  std::map<std::string, std::shared_ptr<TensorTree>> kids_;
};

// Every stage learns whether any failed; the failed ones rethrow their own error.
void agree(Pipeline& pipe, std::exception_ptr error, const char* what, const std::string& path) {
  ProcessGroup& pg = pipe.process_group();
  const Device comm = pg.backend() == "nccl" ? pipe.options().device : kCPU;  // NCCL: device tensors only
  Tensor flag = full({1}, error ? 1 : 0, TensorOptions(kInt32).device(comm));
  pg.allreduce(flag)->wait();
  flag = flag.to(kCPU);
  if (error) std::rethrow_exception(error);
  const int failed = flag.item<int32_t>();
  KILN_CHECK(failed == 0, "{} '{}': failed on {} other stage(s)", what, path, failed);
}

std::string part_path(const std::string& path, int stage) { return path + ".part" + std::to_string(stage); }

}  // namespace

std::string stage_checkpoint_path(const std::string& path, int stage, int stages) {
  const std::string ext = ".safetensors";
  const std::string tag = ".stage" + std::to_string(stage) + "-of-" + std::to_string(stages);
  if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
    return path.substr(0, path.size() - ext.size()) + tag + ext;
  return path + tag;
}

void save_stage_checkpoint(Pipeline& pipe, const std::string& path, const optim::Optimizer* opt,
                           const train::TrainingState& state) {
  std::exception_ptr error;
  try {
    train::save_checkpoint(stage_checkpoint_path(path, pipe.stage(), pipe.num_stages()), pipe.stage_module(), opt, state);
  } catch (...) {
    error = std::current_exception();
  }
  agree(pipe, error, "save_stage_checkpoint", path);
}

train::TrainingState load_stage_checkpoint(Pipeline& pipe, const std::string& path, optim::Optimizer* opt) {
  return load_checkpoint(pipe.process_group(), stage_checkpoint_path(path, pipe.stage(), pipe.num_stages()),
                         pipe.stage_module(), opt);
}

namespace {

// Each stage writes its part ("model."/"optim." keys as in a checkpoint), stage 0 joins them.
void save_merged(Pipeline& pipe, const std::string& path, const train::TrainingState& state,
                 const CheckpointRename& rename, const optim::StateDict* optim_state, const std::string& optim_name) {
  const std::string model = "model.", optim = "optim.";
  std::exception_ptr error;
  try {
    std::map<std::string, Tensor> mine;
    for (const auto& [local, t] : pipe.stage_module().state_dict()) {
      const std::string global = pipe.global_name(local), key = rename ? rename(global) : global;
      if (!key.empty()) mine[model + key] = t;
    }
    if (optim_state)
      for (const auto& [key, t] : *optim_state) mine[optim + key] = t;
    nn::save_safetensors(part_path(path, pipe.stage()), mine, {});
  } catch (...) {
    error = std::current_exception();
  }
  agree(pipe, error, "save_merged_checkpoint", path);
  if (pipe.is_first()) {
    try {
      TensorTree whole;
      optim::StateDict opt;
      for (int s = 0; s < pipe.num_stages(); ++s)
        for (const auto& [key, t] : nn::load_safetensors(part_path(path, s)).tensors) {
          if (key.rfind(model, 0) == 0) whole.put(key.substr(model.size()), t);
          else opt[key.substr(optim.size())] = t;
        }
      if (optim_state) train::save_checkpoint(path, whole, opt, optim_name, state);
      else train::save_checkpoint(path, whole, nullptr, state);
    } catch (...) {
      error = std::current_exception();
    }
    for (int s = 0; s < pipe.num_stages(); ++s) std::remove(part_path(path, s).c_str());
  }
  agree(pipe, error, "save_merged_checkpoint", path);
}

}  // namespace

void save_merged_checkpoint(Pipeline& pipe, const std::string& path, const train::TrainingState& state,
                            const CheckpointRename& rename) {
  save_merged(pipe, path, state, rename, nullptr, "");
}

void save_merged_checkpoint(Pipeline& pipe, const std::string& path, const train::TrainingState& state,
                            const CheckpointRename& rename, const optim::StateDict& optim_state,
                            const std::string& optim_name) {
  save_merged(pipe, path, state, rename, &optim_state, optim_name);
}

train::TrainingState load_merged_checkpoint(Pipeline& pipe, const std::string& path) {
  std::exception_ptr error;
  train::TrainingState state;
  try {
    // The file's own keys make the tree, so load_checkpoint checks integrity, not the split.
    TensorTree whole;
    const std::string prefix = "model.";
    for (const auto& [key, t] : nn::load_safetensors(path).tensors)
      if (key.rfind(prefix, 0) == 0) whole.put(key.substr(prefix.size()), zeros_like(t));
    state = train::load_checkpoint(path, whole, nullptr);
    nn::StateDict all = whole.state_dict(), local;
    for (const auto& [name, t] : pipe.stage_module().state_dict()) {
      std::string global = pipe.global_name(name);
      KILN_CHECK(all.count(global), "load_merged_checkpoint '{}': stage {} needs '{}' (its '{}'), which the file lacks",
                 path, pipe.stage(), global, name);
      local[name] = all.at(global);
    }
    pipe.stage_module().load_state_dict(local);
  } catch (...) {
    error = std::current_exception();
  }
  agree(pipe, error, "load_merged_checkpoint", path);
  return state;
}

}  // namespace kiln::dist
