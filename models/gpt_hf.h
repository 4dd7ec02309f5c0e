// Hugging Face GPT-2 interop: reads a `save_pretrained` directory (config.json + model.safetensors
// with "transformer.wte.weight", "transformer.h.0.attn.c_attn.weight", ...) into Kiln's GPT, and
// writes one back that transformers' GPT2LMHeadModel.from_pretrained loads. HF's GPT-2 keeps its
// projections as Conv1D layers whose weights are [in, out]: those are transposed on the way in and
// out. Keys without the "transformer." prefix (the hub's original gpt2 files) are accepted too.
#pragma once

#include <string>

#include "models/gpt_model.h"

namespace kiln::models::gpt {

/// The model shape from `dir`/config.json (n_layer, n_head, n_embd, n_positions, vocab_size,
/// layer_norm_epsilon). `path` is the directory or the model.safetensors inside it. Throws naming
/// the file and the missing or bad field.
GPTConfig read_hf_config(const std::string& path);

/// Copies the weights of `path` (directory or model.safetensors) into `model`, whose shape must
/// match. Every tensor of the model must be present; the causal-mask buffers HF may store
/// (".attn.bias", ".attn.masked_bias") are ignored, an untied "lm_head.weight" that differs from
/// the token embedding is refused, and anything else unexpected is an error naming it.
void load_hf(GPT& model, const std::string& path);

/// Writes `dir`/model.safetensors and `dir`/config.json (each to a temporary name, then renamed).
void save_hf(const GPT& model, const std::string& dir);

}  // namespace kiln::models::gpt
