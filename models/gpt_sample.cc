// Sampling from a GPT and the CPU's peak FLOP/s (see gpt_sample.h).
#include "models/gpt_sample.h"

#include <cmath>
#include <random>

#include "core/error.h"
#include "core/grad_mode.h"
#include "data/text_corpus.h"

namespace kiln::models::gpt {
using data::text::byte_token_ids;
using data::text::token_byte;

std::string generate(GPT& model, const std::string& prompt, const SampleOptions& o, Device device) {
  KILN_CHECK(o.temperature > 0, "--temperature must be positive, got {}", o.temperature);
  NoGradGuard g;
  model.eval();
  const std::vector<int64_t> ids = byte_token_ids(o.gpt2_bytes);
  std::vector<int64_t> context;
  for (unsigned char ch : prompt) context.push_back(ids[ch]);
  if (context.empty()) context.push_back(ids['\n']);
  std::mt19937_64 rng(o.seed);
  std::string text = prompt;
  const int64_t vocab = model.config.vocab_size;
  const int64_t k = o.top_k > 0 ? std::min(o.top_k, vocab) : vocab;
  for (int64_t i = 0; i < o.tokens; ++i) {
    const int64_t t = std::min<int64_t>(static_cast<int64_t>(context.size()), model.config.block_size);
    std::vector<int64_t> window(context.end() - t, context.end());
    Tensor idx = tensor(window, {1, t}).to(device);
    Tensor logits = model.forward(idx).select(1, t - 1).reshape({vocab}).to(kCPU, kFloat32);
    auto [top, top_ids] = topk(logits, k);
    std::vector<float> v = top.to_vector<float>();
    std::vector<int64_t> vid = top_ids.to_vector<int64_t>();
    std::vector<double> w(v.size());
    for (size_t j = 0; j < v.size(); ++j) w[j] = std::exp((v[j] - v[0]) / o.temperature);  // v[0] is the max
    const int64_t next = vid[std::discrete_distribution<size_t>(w.begin(), w.end())(rng)];
    context.push_back(next);
    const int64_t byte = token_byte(next, o.gpt2_bytes);
    text += byte < 0 ? '?' : static_cast<char>(byte);
  }
  model.train();
  return text;
}

}  // namespace kiln::models::gpt
