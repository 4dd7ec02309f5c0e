#include "distributed/fsdp/fsdp_checkpoint.h"

#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "nn/safetensors.h"

namespace kiln::dist {
namespace fs = std::filesystem;
namespace {

std::string shard_path(const std::string& dir, int rank, int world) {
  return fmt::format("{}/shard-{:05d}-of-{:05d}.safetensors", dir, rank, world);
}

/// The shard index of a per-parameter optimizer key ("state.<i>.<name>", "master.<i>"), or -1.
int64_t state_index(const std::string& key) {
  if (key.starts_with("master.")) return std::stoll(key.substr(7));
  if (!key.starts_with("state.")) return -1;
  const size_t dot = key.find('.', 6);
  return dot == std::string::npos ? -1 : std::stoll(key.substr(6, dot - 6));
}

}  // namespace

void save_fsdp_checkpoint(const std::string& dir, FullyShardedDataParallel& fsdp, const optim::Optimizer& optimizer) {
  ProcessGroup& pg = fsdp.process_group();
  fs::create_directories(dir);
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> meta = {{"fsdp.world_size", std::to_string(pg.size())},
                                             {"fsdp.rank", std::to_string(pg.rank())}};
  const auto units = fsdp.units();
  const auto shards = fsdp.shards();
  meta["fsdp.units"] = std::to_string(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    meta[fmt::format("fsdp.unit.{}.path", u)] = units[u].path;
    meta[fmt::format("fsdp.unit.{}.numel", u)] = std::to_string(units[u].numel);
    tensors[fmt::format("shard.{}", u)] = shards[u].detach();
  }
  for (auto& [key, t] : optimizer.state_dict()) tensors["optim." + key] = t;
  // HSDP: the replicas hold the same shard; the first of them writes it.
  const std::shared_ptr<ProcessGroup>& replicate = fsdp.replicate_group();
  if (!replicate || replicate->rank() == 0) nn::save_safetensors(shard_path(dir, pg.rank(), pg.size()), tensors, meta);
  pg.barrier()->wait();
  if (replicate) replicate->barrier()->wait();
}

void load_fsdp_checkpoint(const std::string& dir, FullyShardedDataParallel& fsdp, optim::Optimizer& optimizer) {
  const ProcessGroup& pg = fsdp.process_group();
  // The writers' world size, from any shard file.
  int old_world = 0;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string n = e.path().filename().string();
      if (n.starts_with("shard-") && n.ends_with(".safetensors") && n.size() > 29)
        old_world = std::stoi(n.substr(n.size() - 17, 5));
    }
  KILN_CHECK(old_world > 0, "load_fsdp_checkpoint: no shard-*-of-*.safetensors in '{}'", dir);
  std::vector<nn::SafetensorsContents> files;
  for (int r = 0; r < old_world; ++r) {
    const std::string path = shard_path(dir, r, old_world);
    KILN_CHECK(fs::exists(path), "load_fsdp_checkpoint: '{}' is missing (the checkpoint has {} shards)", path, old_world);
    files.push_back(nn::load_safetensors(path));
  }
  const auto units = fsdp.units();
  for (int r = 0; r < old_world; ++r) {
    const auto& m = files[r].metadata;
    auto get = [&](const std::string& k) {
      auto it = m.find(k);
      KILN_CHECK(it != m.end(), "load_fsdp_checkpoint: {}: no '{}' in its metadata", shard_path(dir, r, old_world), k);
      return it->second;
    };
    KILN_CHECK(get("fsdp.units") == std::to_string(units.size()),
               "load_fsdp_checkpoint: {} has {} units, the model {}", shard_path(dir, r, old_world), get("fsdp.units"),
               units.size());
    for (size_t u = 0; u < units.size(); ++u) {
      const std::string path = get(fmt::format("fsdp.unit.{}.path", u)), numel = get(fmt::format("fsdp.unit.{}.numel", u));
      KILN_CHECK(path == units[u].path && numel == std::to_string(units[u].numel),
                 "load_fsdp_checkpoint: {}: unit {} is '{}' of {} elements, the model's '{}' of {}",
                 shard_path(dir, r, old_world), u, path, numel, units[u].path, units[u].numel);
    }
  }
  // This rank's slice of a unit's whole vector, put together from every writer's shard.
  const int world = pg.size(), rank = pg.rank();
  auto reshard = [&](size_t u, const std::string& key) {
    std::vector<Tensor> parts;
    for (int r = 0; r < old_world; ++r) {
      auto it = files[r].tensors.find(key);
      KILN_CHECK(it != files[r].tensors.end(), "load_fsdp_checkpoint: {} has no '{}'", shard_path(dir, r, old_world), key);
      parts.push_back(it->second.reshape({-1}));
    }
    Tensor whole = zeros({units[u].padded}, TensorOptions().dtype(parts[0].dtype()));
    whole.narrow(0, 0, units[u].numel).copy_(cat(parts, 0).narrow(0, 0, units[u].numel));
    const int64_t chunk = units[u].padded / world;
    return whole.narrow(0, rank * chunk, chunk).clone();
  };
  std::vector<Tensor> shard_values;
  for (size_t u = 0; u < units.size(); ++u) shard_values.push_back(reshard(u, fmt::format("shard.{}", u)));
  optim::StateDict state;
  for (auto& [key, t] : files[0].tensors) {
    if (!key.starts_with("optim.")) continue;
    const std::string k = key.substr(6);
    const int64_t i = state_index(k);
    state[k] = i >= 0 && t.dim() == 1 && i < static_cast<int64_t>(units.size()) ? reshard(static_cast<size_t>(i), key) : t;
  }
  optimizer.load_state_dict(state);  // validates before changing anything
  NoGradGuard no_grad;
  const auto shards = fsdp.shards();
  for (size_t u = 0; u < units.size(); ++u) shards[u].detach().copy_(shard_values[u]);
}

void save_consolidated(const std::string& path, FullyShardedDataParallel& fsdp) {
  nn::StateDict whole = fsdp.full_state_dict();
  ProcessGroup& pg = fsdp.process_group();
  const std::shared_ptr<ProcessGroup>& replicate = fsdp.replicate_group();
  if (pg.rank() == 0 && (!replicate || replicate->rank() == 0)) nn::save_safetensors(path, {whole.begin(), whole.end()});
  pg.barrier()->wait();
  if (replicate) replicate->barrier()->wait();
}

}  // namespace kiln::dist
