// GPT-2 in Kiln, as nanoGPT's model.py: pre-LayerNorm blocks (fused q/k/v projection, causal
// scaled-dot-product attention, a 4x MLP with tanh GELU), learned positions, a final LayerNorm and
// an LM head tied to the token embedding. Parameter names are Hugging Face's GPT-2 names without
// their "transformer." prefix ("wte.weight", "h.0.attn.c_attn.weight", ...); the LM head owns no
// parameter of its own, so the shared matrix appears once in parameters() and in checkpoints.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nn/nn.h"

namespace kiln::models::gpt {

struct GPTConfig {
  int64_t block_size = 1024;  // longest sequence (positions)
  int64_t vocab_size = 50304;
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0.0;
  double layer_norm_eps = 1e-5;
  /// Recompute each block's activations during backward instead of keeping them (nn::checkpoint):
  /// the same gradients for less memory and about one more forward of compute.
  bool checkpoint_activations = false;
  /// Throws naming the field and value when the shape is impossible (n_embd % n_head != 0, ...).
  void check() const;
};

/// The named configurations: "d6" (6 layers, 6 heads, 384 wide, 256 positions), "d12" (GPT-2
/// small: 12, 12, 768, 1024 positions), "d24" (GPT-2 medium: 24, 16, 1024, 1024 positions). The
/// vocabulary is left at the given default; throws naming an unknown name.
GPTConfig named_config(const std::string& name, int64_t vocab_size);

class CausalSelfAttention : public nn::Module {
 public:
  explicit CausalSelfAttention(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;  // [B, T, C] -> [B, T, C]

  nn::ModulePtr<nn::Linear> c_attn, c_proj;  // q, k, v in one [3C, C] projection; output
  nn::ModulePtr<nn::Dropout> resid_dropout;

 private:
  int64_t n_head_, n_embd_;
  double dropout_;
};

class MLP : public nn::Module {
 public:
  explicit MLP(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;

  nn::ModulePtr<nn::Linear> c_fc, c_proj;
  nn::ModulePtr<nn::Dropout> dropout;
};

class Block : public nn::Module {
 public:
  explicit Block(const GPTConfig& c);
  Tensor forward(const Tensor& x) override;  // x + attn(ln_1(x)), then + mlp(ln_2(.))

  nn::ModulePtr<nn::LayerNorm> ln_1, ln_2;
  nn::ModulePtr<CausalSelfAttention> attn;
  nn::ModulePtr<MLP> mlp;
};

class GPT : public nn::Module {
 public:
  /// GPT-2's initialisation: every weight N(0, 0.02), biases zero, LayerNorms ones/zeros, and the
  /// projections into the residual stream (c_proj) N(0, 0.02 / sqrt(2 n_layer)).
  explicit GPT(const GPTConfig& c);
  /// Token ids [B, T] (i64, T <= block_size, each in [0, vocab_size)) -> logits [B, T, vocab].
  Tensor forward(const Tensor& idx) override;
  /// Mean cross-entropy of logits [B, T, V] against next-token targets [B, T].
  static Tensor loss(const Tensor& logits, const Tensor& targets);

  /// Parameters without the position table (nanoGPT's count: the tied matrix counts once).
  int64_t num_non_embedding_parameters() const;
  /// Model FLOPs of one token's forward and backward: 6 N + 12 L T C (PaLM appendix B, nanoGPT's
  /// estimate_mfu), at sequence length `t`.
  double flops_per_token(int64_t t) const;

  const GPTConfig config;
  nn::ModulePtr<nn::Embedding> wte, wpe;  // wte also serves as the LM head
  nn::ModulePtr<nn::Dropout> drop;
  nn::ModulePtr<nn::Sequential> h;
  nn::ModulePtr<nn::LayerNorm> ln_f;
};

}  // namespace kiln::models::gpt
