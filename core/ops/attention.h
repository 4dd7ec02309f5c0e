// The fused scaled-dot-product attention primitive (flash-attention style): its parameters, its
// op and its two device kernels. The forward keeps one logsumexp per query row instead of the
// [Tq, Tk] probabilities; the backward recomputes them tile by tile. Dropout is drawn from a
// counter-based Philox stream (seed, offset), so the backward regenerates the same mask.
//
// Declared here rather than in core/op_table.h and core/kernels.h so that the op, its CPU
// kernel (cpu_kernels.cc) and its CUDA kernel (cuda/attention.cc) form one library
// (//core:attention) that the rest of core does not rebuild against.
#pragma once

#include <cstdint>
#include <tuple>

#include "core/op.h"
#include "core/tensor.h"

namespace kiln {

struct AttentionParams {
  double scale = 1.0;
  /// Query i attends to keys j <= i (top-left aligned, as PyTorch's is_causal).
  bool causal = false;
  /// Probability of zeroing an attention probability (kept ones are scaled by 1 / (1 - p)).
  double dropout_p = 0.0;
  /// Philox key and first counter of the dropout mask: element e of the [B, H, Tq, Tk]
  /// probabilities is kept when word e % 4 of philox(seed, offset + e / 4) >= p * 2^32.
  uint64_t seed = 0;
  uint64_t offset = 0;
};

/// Philox counters one dropout mask over `elements` probabilities consumes.
inline uint64_t attention_dropout_counters(int64_t elements) { return (static_cast<uint64_t>(elements) + 3) / 4; }

/// The 32-bit threshold below which a Philox word drops its element.
inline uint32_t attention_dropout_threshold(double p) {
  const double t = p * 4294967296.0;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<uint32_t>(t);
}

/// The dropout keep mask (bool, [B, H, Tq, Tk], CPU) the kernels draw for `p`: lets tests and
/// users rebuild the fused computation from core ops.
Tensor attention_dropout_keep_mask(const AttentionParams& p, int64_t B, int64_t H, int64_t Tq, int64_t Tk);

/// softmax(q k^T * scale + mask) v with q [B..., H, Tq, D], k [B..., H, Tk, D], v [B..., H, Tk, Dv]
/// (same leading dims), mask undefined, bool (true = attend) or floating (added), broadcastable
/// to [B..., H, Tq, Tk]. Returns the output [B..., H, Tq, Dv] and the logsumexp of each query
/// row [B..., H, Tq] (f64 for f64 inputs, else f32; -inf for a row with no key to attend to,
/// whose output is 0). Not recorded by autograd.
std::tuple<Tensor, Tensor> attention_with_lse(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                              const AttentionParams& p);

/// `mask` as the kernels take it: undefined, or a 4-D [B, H, Tq, Tk] view (zero strides where it
/// broadcasts) in bool or `dtype`, where B * H covers q's leading dims (see attention_4d).
Tensor attention_mask_4d(const Tensor& mask, const Shape& lead, int64_t Tq, int64_t Tk, DType dtype);
/// A [B..., T, D] operand of rank >= 2 as a contiguous [B, H, T, D] tensor (H = the last leading dim).
Tensor attention_4d(const Tensor& x);

namespace op {
/// The differentiable primitive behind nn::functional::scaled_dot_product_attention.
extern Op<Tensor(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const AttentionParams&)>
    attention;
}  // namespace op

namespace kernels {
// q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, Dv], out [B, H, Tq, Dv]: contiguous, one floating
// dtype. mask undefined or [B, H, Tq, Tk] with any strides, bool or q's dtype. lse [B, H, Tq]
// contiguous, f64 for f64 q else f32.
extern KernelStub<void(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& mask, const AttentionParams& p)>
    attention_forward;
// Writes (=) grad_q, grad_k, grad_v (shapes and dtype of q, k, v; contiguous) and, when defined,
// grad_mask ([B, H, Tq, Tk] contiguous, q's dtype: the gradient of the additive mask) from the
// forward's out and lse.
extern KernelStub<void(Tensor& grad_q, Tensor& grad_k, Tensor& grad_v, Tensor& grad_mask, const Tensor& grad_out,
                       const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const Tensor& out,
                       const Tensor& lse, const AttentionParams& p)>
    attention_backward;
}  // namespace kernels

}  // namespace kiln
