// ZeRO-1 checkpoints; see zero_checkpoint.h. The layout metadata (world size, each bucket's
// shard length) guards sharded loads against a different world size or bucketing.
#include "train/zero_checkpoint.h"

#include "core/error.h"
#include "core/ops.h"
#include "nn/safetensors.h"

namespace kiln::dist {
namespace {

constexpr const char* kShardsKey = "zero.shards";  // TrainingState::extra of a sharded main file
constexpr const char* kLayoutKey = "zero.layout";  // metadata of each shard file

/// The failure flag summed over ranks: throws on a rank that did not fail when another did.
void agree(ProcessGroup& pg, bool failed, const char* what, const std::string& path) {
  Tensor flag = full({1}, failed ? 1 : 0, dtype(kInt32));
  pg.allreduce(flag, ReduceOp::kSum)->wait();
  const int failures = flag.item<int32_t>();
  if (!failed && failures > 0) fail("{} '{}': failed on {} other rank(s) (see their errors)", what, path, failures);
}

std::string layout(ZeroRedundancyOptimizer& opt) {
  std::string s = std::to_string(opt.reducer().process_group().size()) + ":";
  for (const ZeroShard& z : opt.reducer().shards()) s += std::to_string(z.numel) + ",";
  return s;
}

template <class F> std::exception_ptr attempt(F&& f) {
  try {
    f();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

}  // namespace

std::string zero_shard_path(const std::string& path, int rank, int world) {
  return path + ".zero-shard-" + std::to_string(rank) + "-of-" + std::to_string(world);
}

void save_zero_checkpoint(const std::string& path, const nn::Module& model, ZeroRedundancyOptimizer& opt,
                          const train::TrainingState& state, ZeroCheckpointKind kind) {
  ProcessGroup& pg = opt.reducer().process_group();
  std::exception_ptr error;
  if (kind == ZeroCheckpointKind::kConsolidated) {
    optim::StateDict sd = opt.consolidated_state_dict();  // a collective: every rank takes part
    if (pg.rank() == 0)
      error = attempt([&] { train::save_checkpoint(path, model, sd, opt.inner().name(), state); });
    agree(pg, error != nullptr, "save_zero_checkpoint", path);
    if (error) std::rethrow_exception(error);
    return;
  }
  error = attempt([&] {
    std::map<std::string, Tensor> tensors;
    for (auto& [key, t] : opt.shard_state_dict()) tensors["optim." + key] = t;
    nn::save_safetensors(zero_shard_path(path, pg.rank(), pg.size()), tensors,
                         {{kLayoutKey, layout(opt)}, {"kiln.optimizer", opt.inner().name()}});
  });
  agree(pg, error != nullptr, "save_zero_checkpoint (shard)", path);
  if (error) std::rethrow_exception(error);
  if (pg.rank() == 0)
    error = attempt([&] {
      train::TrainingState st = state;
      st.extra[kShardsKey] = std::to_string(pg.size());
      train::save_checkpoint(path, model, nullptr, st);
    });
  agree(pg, error != nullptr, "save_zero_checkpoint", path);
  if (error) std::rethrow_exception(error);
}

train::TrainingState load_zero_checkpoint(const std::string& path, nn::Module& model, ZeroRedundancyOptimizer& opt) {
  ProcessGroup& pg = opt.reducer().process_group();
  train::TrainingState st;
  std::exception_ptr error = attempt([&] {
    nn::SafetensorsContents file = nn::load_safetensors(path);
    auto shards = file.metadata.find(std::string("extra.") + kShardsKey);
    optim::StateDict sd;
    if (shards == file.metadata.end()) {  // consolidated
      for (auto& [key, t] : file.tensors)
        if (key.rfind("optim.", 0) == 0) sd[key.substr(6)] = t;
      KILN_CHECK(!sd.empty(), "load_zero_checkpoint: '{}' holds no optimizer state", path);
    } else {
      KILN_CHECK(shards->second == std::to_string(pg.size()),
                 "load_zero_checkpoint: '{}' was saved sharded over {} ranks; this run has {} (save a consolidated "
                 "checkpoint to change the world size)", path, shards->second, pg.size());
      const std::string shard_path = zero_shard_path(path, pg.rank(), pg.size());
      nn::SafetensorsContents shard = nn::load_safetensors(shard_path);
      auto saved = shard.metadata.find(kLayoutKey);
      KILN_CHECK(saved != shard.metadata.end() && saved->second == layout(opt),
                 "load_zero_checkpoint: '{}' has shard layout '{}', this run's is '{}' (world size: shard length of "
                 "each bucket)", shard_path, saved == shard.metadata.end() ? "none" : saved->second, layout(opt));
      for (auto& [key, t] : shard.tensors)
        if (key.rfind("optim.", 0) == 0) sd[key.substr(6)] = t;
    }
    // The optimizer first (it validates fully before changing), then the model; a model that
    // does not match puts the optimizer back.
    optim::StateDict backup = opt.shard_state_dict();
    if (shards == file.metadata.end())
      opt.load_consolidated_state_dict(sd);
    else
      opt.load_shard_state_dict(sd);
    try {
      st = train::load_checkpoint(path, model, nullptr);
    } catch (...) {
      opt.load_shard_state_dict(backup);
      throw;
    }
    st.extra.erase(kShardsKey);
  });
  agree(pg, error != nullptr, "load_zero_checkpoint", path);
  if (error) std::rethrow_exception(error);
  opt.reducer().refresh_shards();
  return st;
}

}  // namespace kiln::dist
