// Text generation from a trained GPT (temperature and top-k sampling, no key/value cache: each new
// token reruns the model over the last block_size tokens), and the peak FLOP/s its MFU is measured
// against.
#pragma once

#include <cstdint>
#include <string>

#include "core/device.h"
#include "models/gpt_model.h"

namespace kiln::models::gpt {

struct SampleOptions {
  int64_t tokens = 200;
  double temperature = 0.8;  // > 0; logits are divided by it
  int64_t top_k = 40;        // 0: the whole vocabulary
  uint64_t seed = 0;
  bool gpt2_bytes = false;   // token ids are GPT-2's byte tokens (see byte_token_ids)
};

/// `prompt` continued by `o.tokens` sampled tokens, decoded as bytes (tokens that are not single
/// bytes print as "?"). Runs in eval mode without recording, then restores training mode.
std::string generate(GPT& model, const std::string& prompt, const SampleOptions& o, Device device);

}  // namespace kiln::models::gpt
