// GPT-2's modules (see gpt_model.h).
#include "models/gpt_model.h"

#include <cmath>

#include "core/error.h"
#include "core/grad_mode.h"

namespace kiln::models::gpt {

namespace F = nn::functional;

void GPTConfig::check() const {
  KILN_CHECK(block_size > 0, "GPT: block_size must be positive, got {}", block_size);
  KILN_CHECK(vocab_size > 0, "GPT: vocab_size must be positive, got {}", vocab_size);
  KILN_CHECK(n_layer > 0, "GPT: n_layer must be positive, got {}", n_layer);
  KILN_CHECK(n_head > 0 && n_embd > 0 && n_embd % n_head == 0,
             "GPT: n_embd ({}) must be a positive multiple of n_head ({})", n_embd, n_head);
  KILN_CHECK(dropout >= 0 && dropout < 1, "GPT: dropout must be in [0, 1), got {}", dropout);
}

GPTConfig named_config(const std::string& name, int64_t vocab_size) {
  GPTConfig c;
  c.vocab_size = vocab_size;
  if (name == "d6") {
    c.n_layer = 6, c.n_head = 6, c.n_embd = 384, c.block_size = 256;
  } else if (name == "d12") {
    c.n_layer = 12, c.n_head = 12, c.n_embd = 768, c.block_size = 1024;
  } else if (name == "d24") {
    c.n_layer = 24, c.n_head = 16, c.n_embd = 1024, c.block_size = 1024;
  } else {
    fail("--model: unknown configuration '{}' (choose d6, d12 or d24)", name);
  }
  return c;
}

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c)
    : n_head_(c.n_head), n_embd_(c.n_embd), dropout_(c.dropout) {
  c_attn = register_module("c_attn", nn::Linear(c.n_embd, 3 * c.n_embd));
  c_proj = register_module("c_proj", nn::Linear(c.n_embd, c.n_embd));
  resid_dropout = register_module("resid_dropout", nn::Dropout(c.dropout));
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  const int64_t b = x.size(0), t = x.size(1), hd = n_embd_ / n_head_;
  // [B, T, 3C] -> q, k, v each [B, H, T, D].
  std::vector<Tensor> qkv = c_attn(x).split(n_embd_, 2);
  auto heads = [&](const Tensor& m) { return m.reshape({b, t, n_head_, hd}).transpose(1, 2); };
  Tensor y = F::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]),
                                             {.dropout_p = is_training() ? dropout_ : 0.0, .causal = true});
  y = y.transpose(1, 2).reshape({b, t, n_embd_});  // heads side by side again
  return resid_dropout(c_proj(y));
}

MLP::MLP(const GPTConfig& c) {
  c_fc = register_module("c_fc", nn::Linear(c.n_embd, 4 * c.n_embd));
  c_proj = register_module("c_proj", nn::Linear(4 * c.n_embd, c.n_embd));
  dropout = register_module("dropout", nn::Dropout(c.dropout));
}

Tensor MLP::forward(const Tensor& x) {
  return dropout(c_proj(F::gelu(c_fc(x), "tanh")));
}

Block::Block(const GPTConfig& c) {
  ln_1 = register_module("ln_1", nn::LayerNorm({c.n_embd}, c.layer_norm_eps));
  attn = register_module("attn", CausalSelfAttention(c));
  ln_2 = register_module("ln_2", nn::LayerNorm({c.n_embd}, c.layer_norm_eps));
  mlp = register_module("mlp", MLP(c));
}

Tensor Block::forward(const Tensor& x) {
  Tensor h = x + attn(ln_1(x));
  return h + mlp(ln_2(h));
}

GPT::GPT(const GPTConfig& c) : config(c) {
  c.check();
  wte = register_module("wte", nn::Embedding(c.vocab_size, c.n_embd));
  wpe = register_module("wpe", nn::Embedding(c.block_size, c.n_embd));
  drop = register_module("drop", nn::Dropout(c.dropout));
  h = register_module("h", nn::Sequential());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(std::make_shared<Block>(c));
  ln_f = register_module("ln_f", nn::LayerNorm({c.n_embd}, c.layer_norm_eps));

  NoGradGuard g;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  for (auto& [name, p] : named_parameters()) {
    const bool is_bias = name.ends_with(".bias"), is_norm = name.starts_with("ln_f") || name.find(".ln_") != std::string::npos;
    if (is_norm) continue;  // LayerNorm keeps ones and zeros
    if (is_bias) nn::init::zeros_(p);
    else nn::init::normal_(p, 0.0, name.ends_with("c_proj.weight") ? residual_std : 0.02);
  }
}

Tensor GPT::forward(const Tensor& idx) {
  KILN_CHECK(idx.dim() == 2 && idx.dtype() == kInt64, "GPT: expected token ids [B, T] of i64, got {} {}",
             idx.shape_str(), idx.dtype());
  const int64_t t = idx.size(1);
  KILN_CHECK(t <= config.block_size, "GPT: sequence of {} tokens is longer than block_size {}", t, config.block_size);
  Tensor pos = arange(t, TensorOptions().dtype(kInt64).device(idx.device()));
  Tensor x = drop(wte(idx) + wpe(pos));
  if (config.checkpoint_activations) {
    for (size_t i = 0; i < h->size(); ++i) {
      nn::Module* block = (*h)[i].get();  // kept alive by the model until backward has run
      x = nn::checkpoint([block](const Tensor& in) { return block->forward(in); }, x);
    }
  } else {
    x = h(x);
  }
  x = ln_f(x);
  return F::linear(x, wte->weight);  // the tied LM head
}

Tensor GPT::loss(const Tensor& logits, const Tensor& targets) {
  const int64_t v = logits.size(-1);
  return F::cross_entropy(logits.reshape({-1, v}), targets.reshape({-1}));
}

int64_t GPT::num_non_embedding_parameters() const { return num_parameters() - wpe->weight.numel(); }

double GPT::flops_per_token(int64_t t) const {
  return 6.0 * static_cast<double>(num_non_embedding_parameters()) +
         12.0 * static_cast<double>(config.n_layer * t * config.n_embd);
}

}  // namespace kiln::models::gpt
