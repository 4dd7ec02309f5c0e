// Checkpoint layout on top of safetensors, and the validate-then-apply order of loading:
// file -> metadata -> model keys/shapes -> optimizer (validates itself, all or nothing) ->
// model (already checked; on an unexpected failure the optimizer is rolled back) -> generator.
#include "train/checkpoint.h"

#include <charconv>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/grad_mode.h"
#include "nn/safetensors.h"

namespace kiln::train {
namespace {

constexpr const char* kFormatKey = "kiln.format";
constexpr const char* kFormat = "kiln-checkpoint-v1";
constexpr const char* kModelPrefix = "model.";
constexpr const char* kOptimPrefix = "optim.";
constexpr const char* kExtraPrefix = "extra.";

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

template <class T> bool parse_int(const std::string& s, T& out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

}  // namespace

namespace {

void save(const std::string& path, const nn::Module& model, const optim::StateDict* optim_state,
          const std::string& optim_name, const TrainingState& state) {
  std::map<std::string, Tensor> tensors;
  for (auto& [name, t] : model.state_dict()) tensors[kModelPrefix + name] = t;
  if (optim_state)
    for (auto& [key, t] : *optim_state) tensors[kOptimPrefix + key] = t;
  std::map<std::string, std::string> meta = {
      {kFormatKey, kFormat},
      {"kiln.step", std::to_string(state.step)},
      {"kiln.epoch", std::to_string(state.epoch)},
      {"kiln.batch", std::to_string(state.batch)},
      {"kiln.rng.seed", std::to_string(state.rng.seed)},
      {"kiln.rng.offset", std::to_string(state.rng.offset)},
      {"kiln.model", model.type_name()},
      // The Hugging Face convention, so torch-side loaders know the layout.
      {"format", "pt"},
  };
  if (optim_state) meta["kiln.optimizer"] = optim_name;
  for (const auto& [key, value] : state.extra) meta[kExtraPrefix + key] = value;
  nn::save_safetensors(path, tensors, meta);
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer* opt,
                     const TrainingState& state) {
  if (!opt) return save(path, model, nullptr, "", state);
  const optim::StateDict sd = opt->state_dict();
  save(path, model, &sd, opt->name(), state);
}

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::StateDict& optim_state,
                     const std::string& optim_name, const TrainingState& state) {
  save(path, model, &optim_state, optim_name, state);
}

TrainingState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* opt, Generator* rng) {
  auto bad = [&](const std::string& what) { fail("load_checkpoint: '{}': {}", path, what); };
  nn::SafetensorsContents file = nn::load_safetensors(path);  // throws naming the file

  // ---- metadata
  auto meta = [&](const char* key) -> const std::string& {
    auto it = file.metadata.find(key);
    if (it == file.metadata.end()) bad(fmt::format("metadata has no '{}' (not a Kiln checkpoint?)", key));
    return it->second;
  };
  if (meta(kFormatKey) != kFormat)
    bad(fmt::format("metadata '{}' is '{}', expected '{}'", kFormatKey, meta(kFormatKey), kFormat));
  TrainingState st;
  auto number = [&](const char* key, auto& out) {
    if (!parse_int(meta(key), out)) bad(fmt::format("metadata '{}' is '{}', not an integer", key, meta(key)));
  };
  number("kiln.step", st.step);
  number("kiln.epoch", st.epoch);
  // Absent from checkpoints written before mid-epoch saves existed: those were taken at epoch ends.
  if (file.metadata.count("kiln.batch")) number("kiln.batch", st.batch);
  if (st.step < 0 || st.epoch < 0 || st.batch < 0)
    bad(fmt::format("negative position: step {}, epoch {}, batch {}", st.step, st.epoch, st.batch));
  number("kiln.rng.seed", st.rng.seed);
  number("kiln.rng.offset", st.rng.offset);
  for (const auto& [key, value] : file.metadata)
    if (starts_with(key, kExtraPrefix)) st.extra[key.substr(std::string_view(kExtraPrefix).size())] = value;

  // ---- split the tensors
  nn::StateDict model_state;
  optim::StateDict optim_state;
  for (auto& [key, t] : file.tensors) {
    if (starts_with(key, kModelPrefix)) model_state[key.substr(std::string_view(kModelPrefix).size())] = t;
    else if (starts_with(key, kOptimPrefix)) optim_state[key.substr(std::string_view(kOptimPrefix).size())] = t;
    else bad(fmt::format("unexpected tensor '{}' (checkpoint tensors start with 'model.' or 'optim.')", key));
  }

  // ---- model: same keys, same shapes, compatible dtypes
  nn::StateDict mine = model.state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, t] : mine) {
    auto it = model_state.find(name);
    if (it == model_state.end()) {
      missing.push_back(name);
      continue;
    }
    const Tensor& saved = it->second;
    if (saved.sizes() != t.sizes())
      mismatched.push_back(fmt::format("{} (checkpoint {}, model {})", name, saved.shape_str(), t.shape_str()));
    else if (saved.dtype() != t.dtype() && !(saved.is_floating_point() && t.is_floating_point()))
      mismatched.push_back(fmt::format("{} (checkpoint dtype {}, model dtype {})", name, saved.dtype(), t.dtype()));
  }
  for (const auto& [name, t] : model_state)
    if (!mine.count(name)) unexpected.push_back(name);
  if (!missing.empty() || !unexpected.empty() || !mismatched.empty()) {
    std::string what = fmt::format("does not match {}:", model.type_name());
    if (!missing.empty()) what += fmt::format(" missing keys [{}];", fmt::join(missing, ", "));
    if (!unexpected.empty()) what += fmt::format(" unexpected keys [{}];", fmt::join(unexpected, ", "));
    if (!mismatched.empty()) what += fmt::format(" mismatched [{}];", fmt::join(mismatched, ", "));
    what.pop_back();
    bad(what);
  }
  if (opt && optim_state.empty())
    bad(fmt::format("holds no optimizer state, but an optimizer ({}) was given to restore", opt->name()));

  // ---- apply: the optimizer first (its load validates completely before changing anything)
  optim::StateDict optim_backup;
  if (opt) {
    optim_backup = opt->state_dict();
    try {
      opt->load_state_dict(optim_state);
    } catch (const Error& e) {
      bad(fmt::format("optimizer state does not match: {}", e.what()));
    }
  }
  try {
    model.load_state_dict(model_state, /*strict=*/true);
  } catch (const Error& e) {
    if (opt) opt->load_state_dict(optim_backup);
    bad(fmt::format("cannot restore the model: {}", e.what()));
  }
  if (rng) rng->set_state(st.rng);
  return st;
}

}  // namespace kiln::train
