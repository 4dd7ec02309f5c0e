// scaled_dot_product_attention: checks its arguments, draws the dropout stream, and runs the fused
// primitive (core/ops/attention.h); the composite of core ops stays as the reference.
#include "nn/attention.h"

#include <cmath>

#include "core/error.h"
#include "core/kernels.h"
#include "core/op_table.h"
#include "core/ops.h"
#include "core/ops/attention.h"
#include "nn/functional.h"

namespace kiln::nn::functional {
namespace {

void check_attention_args(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  KILN_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(),
             "scaled_dot_product_attention: q, k, v must have the same rank >= 2, got {}, {}, {}",
             q.shape(), k.shape(), v.shape());
  const int64_t n = q.dim();
  KILN_CHECK(q.size(n - 1) == k.size(n - 1), "scaled_dot_product_attention: q's last dim {} != k's {}",
             q.size(n - 1), k.size(n - 1));
  KILN_CHECK(k.size(n - 2) == v.size(n - 2), "scaled_dot_product_attention: k has {} keys but v has {} values",
             k.size(n - 2), v.size(n - 2));
  KILN_CHECK(!(o.causal && o.attn_mask.defined()),
             "scaled_dot_product_attention: give causal=true or attn_mask, not both (as PyTorch)");
  KILN_CHECK(!o.causal || q.size(n - 2) == k.size(n - 2),
             "scaled_dot_product_attention: causal needs as many queries as keys, got {} and {}",
             q.size(n - 2), k.size(n - 2));
  KILN_CHECK(o.dropout_p >= 0.0 && o.dropout_p < 1.0,
             "scaled_dot_product_attention: dropout_p must be in [0, 1), got {}", o.dropout_p);
}

}  // namespace

Tensor scaled_dot_product_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const AttentionOptions& o) {
  check_attention_args(q, k, v, o);
  const int64_t n = q.dim();
  const double scale = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(n - 1))));
  Tensor scores = matmul(q, k.transpose(n - 2, n - 1)) * scale;
  if (o.causal) {
    const int64_t t = q.size(n - 2);
    Tensor above = ones({t, t}, TensorOptions().device(q.device()).dtype(kBool)).triu(1);
    scores = scores.masked_fill(above, -INFINITY);
  } else if (o.attn_mask.defined()) {
    scores = o.attn_mask.dtype() == kBool ? where(o.attn_mask, scores, Scalar(-INFINITY)) : scores + o.attn_mask;
  }
  Tensor probs = softmax(scores, -1);
  if (o.dropout_p > 0.0) probs = dropout(probs, o.dropout_p, /*training=*/true, o.generator);
  return matmul(probs, v);
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  check_attention_args(q, k, v, o);
  // A device whose backend registered no fused kernel in the attention_forward/backward slots
  // still computes attention, through the composite.
  if (!kernels::attention_forward.has(q.device().type) || !kernels::attention_backward.has(q.device().type))
    return scaled_dot_product_attention_composite(q, k, v, o);
  const int64_t n = q.dim();
  AttentionParams p;
  p.scale = o.scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(n - 1))));
  p.causal = o.causal;
  p.dropout_p = o.dropout_p;
  if (o.dropout_p > 0.0) {
    // The mask's counters are reserved now; backward regenerates it from (seed, offset).
    int64_t elements = q.size(n - 2) * k.size(n - 2);  // [B..., H, Tq, Tk] probabilities
    for (int64_t i = 0; i < n - 2; ++i) elements *= q.size(i);
    const GeneratorState s = (o.generator ? *o.generator : default_generator()).reserve(
        attention_dropout_counters(elements));
    p.seed = s.seed;
    p.offset = s.offset;
  }
  return op::attention(q, k, v, o.attn_mask, p);
}

}  // namespace kiln::nn::functional
