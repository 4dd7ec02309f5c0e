// Scaled dot-product attention, torch.nn.functional.scaled_dot_product_attention's contract:
// q [B..., H, Tq, D], k [B..., H, Tk, D], v [B..., H, Tk, Dv] -> [B..., H, Tq, Dv].
#pragma once

#include <optional>

#include "core/generator.h"
#include "core/tensor.h"

namespace kiln::nn::functional {

struct AttentionOptions {
  /// Boolean mask (true = may attend) or an additive float mask, broadcastable to [B..., H, Tq, Tk].
  Tensor attn_mask;
  /// Dropout on the attention probabilities (only while training).
  double dropout_p = 0.0;
  /// Query i attends to keys j <= i (+ Tk - Tq when Tk > Tq is not supported: Tq == Tk required).
  bool causal = false;
  /// Multiplies q.k; defaults to 1/sqrt(D).
  std::optional<double> scale;
  Generator* generator = nullptr;
};

/// softmax(q k^T * scale + mask) v as one fused primitive (core/ops/attention.h): flash-style
/// kernels on CPU (f32/f64; f16/bf16 computed in f32) and CUDA (f32/f16/bf16/f64, head dims <= 128,
/// part of //cuda) that keep a logsumexp per query row instead of the [Tq, Tk]
/// probabilities. Dropout is fused (a Philox stream that backward regenerates). A query with no
/// key to attend to (a fully masked row) gives 0 and no gradient, where the composite gives NaN.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});

/// The same computed from core ops (matmul, softmax, dropout), storing the [Tq, Tk] probabilities:
/// the reference the fused kernel is tested against.
Tensor scaled_dot_product_attention_composite(const Tensor& q, const Tensor& k, const Tensor& v,
                                              const AttentionOptions& options = {});

}  // namespace kiln::nn::functional
