// Hugging Face GPT-2 layout <-> Kiln's GPT (see gpt_hf.h).
#include "models/gpt_hf.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/grad_mode.h"
#include "nn/safetensors.h"

namespace kiln::models::gpt {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "transformer.";

fs::path hf_dir(const std::string& path) {
  KILN_CHECK(fs::exists(path), "--init-from-hf: '{}' does not exist", path);
  return fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path();
}

fs::path weights_file(const std::string& path) {
  return fs::is_directory(path) ? fs::path(path) / "model.safetensors" : fs::path(path);
}

/// HF's Conv1D layers store [in, out]: the attention and MLP projections.
bool is_conv1d_weight(const std::string& name) {
  return name.ends_with("c_attn.weight") || name.ends_with("c_proj.weight") || name.ends_with("c_fc.weight");
}

bool is_mask_buffer(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

void write_text_atomically(const fs::path& path, const std::string& text) {
  const std::string tmp = path.string() + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    KILN_CHECK(out.good(), "save_hf: cannot write '{}'", tmp);
  }
  KILN_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "save_hf: cannot rename '{}' to '{}'", tmp, path.string());
}

}  // namespace

GPTConfig read_hf_config(const std::string& path) {
  const fs::path file = hf_dir(path) / "config.json";
  std::ifstream in(file);
  KILN_CHECK(in.good(), "--init-from-hf: cannot open '{}' (a save_pretrained directory has one)", file.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("--init-from-hf: '{}' is not valid JSON: {}", file.string(), e.what());
  }
  auto field = [&](const char* key) -> int64_t {
    KILN_CHECK(j.contains(key) && j[key].is_number_integer(), "--init-from-hf: '{}' has no integer \"{}\"",
               file.string(), key);
    return j[key].get<int64_t>();
  };
  GPTConfig c;
  c.n_layer = field("n_layer");
  c.n_head = field("n_head");
  c.n_embd = field("n_embd");
  c.block_size = field("n_positions");
  c.vocab_size = field("vocab_size");
  c.layer_norm_eps = j.value("layer_norm_epsilon", 1e-5);
  KILN_CHECK(!j.contains("n_inner") || j["n_inner"].is_null() || j["n_inner"] == 4 * c.n_embd,
             "--init-from-hf: '{}' has n_inner {}; Kiln's GPT has a 4 x n_embd MLP", file.string(), j["n_inner"].dump());
  const std::string act = j.value("activation_function", "gelu_new");
  KILN_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh",
             "--init-from-hf: '{}' uses activation_function \"{}\"; Kiln's GPT uses GELU's tanh approximation",
             file.string(), act);
  c.dropout = 0.0;
  c.check();
  return c;
}

void load_hf(GPT& model, const std::string& path) {
  const std::string file = weights_file(path).string();
  nn::SafetensorsContents hf = nn::load_safetensors(file);
  nn::StateDict state;
  for (auto& [key, t] : hf.tensors) {
    std::string name = key.starts_with(kPrefix) ? key.substr(std::string(kPrefix).size()) : key;
    if (is_mask_buffer(name)) continue;
    if (name == "lm_head.weight") continue;  // checked against wte below
    state[name] = is_conv1d_weight(name) && t.dim() == 2 ? t.t().contiguous() : t;
  }
  if (auto it = hf.tensors.find("lm_head.weight"); it != hf.tensors.end()) {
    auto wte = state.find("wte.weight");
    KILN_CHECK(wte != state.end() && wte->second.sizes() == it->second.sizes() &&
                   (wte->second.to(kFloat32) - it->second.to(kFloat32)).abs().max().item<double>() == 0.0,
               "--init-from-hf: '{}' has an lm_head.weight that is not the token embedding (Kiln's GPT ties them)",
               file);
  }
  try {
    model.load_state_dict(state);
  } catch (const Error& e) {
    fail("--init-from-hf: '{}' does not fit the model: {}", file, e.what());
  }
}

void save_hf(const GPT& model, const std::string& dir) {
  fs::create_directories(dir);
  std::map<std::string, Tensor> out;
  NoGradGuard g;
  for (auto& [name, t] : model.named_parameters())
    out[kPrefix + name] = is_conv1d_weight(name) ? t.t().contiguous() : t;
  nn::save_safetensors((fs::path(dir) / "model.safetensors").string(), out, {{"format", "pt"}});
  const GPTConfig& c = model.config;
  nlohmann::ordered_json j = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"activation_function", "gelu_new"},
      {"n_layer", c.n_layer},
      {"n_head", c.n_head},
      {"n_embd", c.n_embd},
      {"n_positions", c.block_size},
      {"n_ctx", c.block_size},
      {"vocab_size", c.vocab_size},
      {"layer_norm_epsilon", c.layer_norm_eps},
      {"tie_word_embeddings", true},
      // GPT-2's <|endoftext|> when the vocabulary has it; none otherwise (byte vocabularies).
      {"bos_token_id", c.vocab_size > 50256 ? nlohmann::json(50256) : nlohmann::json(nullptr)},
      {"eos_token_id", c.vocab_size > 50256 ? nlohmann::json(50256) : nlohmann::json(nullptr)},
      {"attn_pdrop", c.dropout},
      {"embd_pdrop", c.dropout},
      {"resid_pdrop", c.dropout},
  };
  write_text_atomically(fs::path(dir) / "config.json", j.dump(2) + "\n");
}

}  // namespace kiln::models::gpt
