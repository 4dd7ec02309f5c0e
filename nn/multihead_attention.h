// MultiheadAttention, as torch.nn.MultiheadAttention(embed_dim, num_heads, dropout, bias,
// batch_first=True): packed input projection `in_proj_weight` [3E, E] / `in_proj_bias` [3E] and
// `out_proj` (Linear E -> E), so its state_dict keys and shapes are PyTorch's. Attention runs
// through the fused nn::functional::scaled_dot_product_attention.
#pragma once

#include <memory>

#include "nn/linear.h"
#include "nn/module.h"

namespace kiln::nn {

struct MultiheadAttentionForward {
  /// PyTorch's convention: bool true = may NOT attend, or additive float. [Tq, Tk] or
  /// [B * num_heads, Tq, Tk].
  Tensor attn_mask;
  /// [B, Tk]: bool true = padding key (ignored), or additive float.
  Tensor key_padding_mask;
  /// Query i attends to keys j <= i (when no attn_mask is given).
  bool is_causal = false;
};

class MultiheadAttention : public Module {
 public:
  /// embed_dim must divide into num_heads; dropout applies to the attention probabilities in
  /// training mode.
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true);

  /// query [B, Tq, E], key and value [B, Tk, E] -> [B, Tq, E] (the attention weights are not
  /// returned: the fused kernel never forms them).
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const MultiheadAttentionForward& options = {});
  /// Self-attention: forward(x, x, x).
  Tensor forward(const Tensor& x) override { return forward(x, x, x); }
  /// `mha(query, key, value, options)`, as calling torch.nn.MultiheadAttention.
  using Module::operator();
  Tensor operator()(const Tensor& query, const Tensor& key, const Tensor& value,
                    const MultiheadAttentionForward& options = {}) {
    return forward(query, key, value, options);
  }
  std::string extra_repr() const override;

  Tensor in_proj_weight, in_proj_bias;
  ModulePtr<Linear> out_proj;
  const int64_t embed_dim, num_heads, head_dim;
  const double dropout;
};

}  // namespace kiln::nn
