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

/// The CPU's peak f32 FLOP/s for `threads` cores: threads x clock (the "cpu MHz" of /proc/cpuinfo)
/// x FLOPs per cycle per core (32: two 8-wide FMA pipes, as AVX2 cores and AMD's double-pumped
/// AVX-512 have; 64 on Intel CPUs with AVX-512 and two 512-bit FMA units). `description` receives
/// the derivation, e.g. "2 threads x 2596 MHz x 32 FLOP/cycle (AMD EPYC)".
double cpu_peak_flops(int threads, std::string* description);

}  // namespace kiln::models::gpt
