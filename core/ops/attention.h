// The fused scaled-dot-product attention primitive (flash-attention style), beside its row in
// the op table: the forward with its logsumexp, the views the kernels take, and the dropout mask.
// The op is op::attention (core/op_table.h), its kernels attention_forward/attention_backward
// (core/kernels.h: CPU in core/cpu/attention_kernels.cc and attention_backward_kernels.cc, CUDA
// in cuda/attention.cc) and its parameters AttentionParams (core/op_kinds.h). The forward keeps
// one logsumexp per query row instead of the [Tq, Tk] probabilities; the backward recomputes them
// tile by tile. Dropout is drawn from a counter-based Philox stream (seed, offset), so the
// backward regenerates the same mask.
#pragma once

#include <cstdint>
#include <tuple>

#include "core/op_kinds.h"
#include "core/tensor.h"

namespace kiln {

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
/// whose output is 0). The output is laid out by attention_output. Not recorded by autograd.
std::tuple<Tensor, Tensor> attention_with_lse(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                              const AttentionParams& p);

/// `mask` as the kernels take it: undefined, or a 4-D [B, H, Tq, Tk] view (zero strides where it
/// broadcasts) in bool or `dtype`, where B * H covers q's leading dims (see attention_4d).
Tensor attention_mask_4d(const Tensor& mask, const Shape& lead, int64_t Tq, int64_t Tk, DType dtype);
/// A [B..., T, D] operand of rank >= 2 as the kernels take it: a [B, H, T, D] tensor (H = the last
/// leading dim) whose rows are GEMM rows (last dim's stride 1, rows `stride(2) >= D` apart), any
/// other strides; a view of `x` where its strides allow (heads sliced from one [B, T, 3C]
/// projection), else a contiguous copy. Kernels that want contiguous operands call dense().
Tensor attention_4d(const Tensor& x);
/// A [lead..., T, D] tensor laid out as [lead[:-1]..., T, H, D] (H = lead's last dim) and viewed
/// back, as PyTorch allocates attention's output: y.transpose(-3, -2).reshape(..., T, H * D),
/// heads side by side again, is then a view. Plain [T, D] when lead is empty.
Tensor attention_output(const Shape& lead, int64_t T, int64_t D, DType dtype, Device device);

}  // namespace kiln
