// MultiheadAttention: project, split heads, fused attention, merge heads, project. Masks are
// translated from nn.MultiheadAttention's convention (true = blocked) to SDPA's (true = attend).
#include "nn/multihead_attention.h"

#include <cmath>

#include "core/error.h"
#include "core/ops.h"
#include "nn/attention.h"
#include "nn/functional.h"
#include "nn/init.h"

namespace kiln::nn {
namespace {

/// SDPA's form of an nn.MultiheadAttention mask: bool inverted, float as is.
Tensor to_sdpa_mask(const Tensor& m) { return m.dtype() == kBool ? (m == Scalar(false)) : m; }

/// A bool-or-additive mask as an additive one in `dtype`.
Tensor additive(const Tensor& sdpa_mask, DType dtype) {
  if (sdpa_mask.dtype() != kBool) return sdpa_mask.to(dtype);
  return zeros(sdpa_mask.shape(), TensorOptions().dtype(dtype).device(sdpa_mask.device()))
      .masked_fill(sdpa_mask == Scalar(false), -INFINITY);
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim_, int64_t num_heads_, double dropout_, bool bias)
    : Module("MultiheadAttention"),
      embed_dim(embed_dim_),
      num_heads(num_heads_),
      head_dim(num_heads_ > 0 ? embed_dim_ / num_heads_ : 0),
      dropout(dropout_) {
  KILN_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0,
             "MultiheadAttention: embed_dim {} must be a positive multiple of num_heads {}", embed_dim, num_heads);
  KILN_CHECK(dropout >= 0.0 && dropout < 1.0, "MultiheadAttention: dropout must be in [0, 1), got {}", dropout);
  Tensor w = empty({3 * embed_dim, embed_dim});
  init::xavier_uniform_(w);
  in_proj_weight = register_parameter("in_proj_weight", w);
  if (bias) in_proj_bias = register_parameter("in_proj_bias", zeros({3 * embed_dim}));
  out_proj = register_module("out_proj", Linear(embed_dim, embed_dim, bias));
  if (bias) init::zeros_(out_proj->bias);
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const MultiheadAttentionForward& o) {
  KILN_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3,
             "MultiheadAttention: expected batch_first query, key, value [B, T, {}], got {}, {}, {}", embed_dim,
             query.shape(), key.shape(), value.shape());
  KILN_CHECK(query.size(2) == embed_dim && key.size(2) == embed_dim && value.size(2) == embed_dim,
             "MultiheadAttention: embedding dim must be {}, got query {}, key {}, value {}", embed_dim, query.shape(),
             key.shape(), value.shape());
  KILN_CHECK(key.size(0) == query.size(0) && value.size(0) == query.size(0) && key.size(1) == value.size(1),
             "MultiheadAttention: batch or key length mismatch: query {}, key {}, value {}", query.shape(), key.shape(),
             value.shape());
  const int64_t B = query.size(0), Tq = query.size(1), Tk = key.size(1), E = embed_dim;
  auto project = [&](const Tensor& x, int64_t i, int64_t T) {
    Tensor b = in_proj_bias.defined() ? in_proj_bias.slice(0, i * E, (i + 1) * E) : Tensor();
    return functional::linear(x, in_proj_weight.slice(0, i * E, (i + 1) * E), b)
        .reshape({B, T, num_heads, head_dim})
        .transpose(1, 2);
  };
  Tensor q = project(query, 0, Tq), k = project(key, 1, Tk), v = project(value, 2, Tk);

  Tensor mask;
  if (o.attn_mask.defined()) {
    const Tensor& m = o.attn_mask;
    KILN_CHECK((m.dim() == 2 && m.size(0) == Tq && m.size(1) == Tk) ||
                   (m.dim() == 3 && m.size(0) == B * num_heads && m.size(1) == Tq && m.size(2) == Tk),
               "MultiheadAttention: attn_mask must be [{}, {}] or [{}, {}, {}], got {}", Tq, Tk, B * num_heads, Tq, Tk,
               m.shape());
    mask = to_sdpa_mask(m.dim() == 3 ? m.reshape({B, num_heads, Tq, Tk}) : m);
  }
  if (o.key_padding_mask.defined()) {
    const Tensor& kp = o.key_padding_mask;
    KILN_CHECK(kp.dim() == 2 && kp.size(0) == B && kp.size(1) == Tk,
               "MultiheadAttention: key_padding_mask must be [{}, {}], got {}", B, Tk, kp.shape());
    Tensor pad = to_sdpa_mask(kp).reshape({B, 1, 1, Tk});
    if (!mask.defined()) mask = pad;
    else mask = additive(mask, q.dtype()) + additive(pad, q.dtype());
  }
  functional::AttentionOptions ao;
  ao.attn_mask = mask;
  ao.causal = o.is_causal && !mask.defined();
  ao.dropout_p = is_training() ? dropout : 0.0;
  Tensor y = functional::scaled_dot_product_attention(q, k, v, ao);
  return out_proj(y.transpose(1, 2).reshape({B, Tq, E}));
}

std::string MultiheadAttention::extra_repr() const {
  return fmt::format("embed_dim={}, num_heads={}, dropout={}, bias={}", embed_dim, num_heads, dropout,
                     in_proj_bias.defined());
}

}  // namespace kiln::nn
