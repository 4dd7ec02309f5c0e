// The fused cross-entropy and layer-norm primitives' forwards with the statistics their backward
// reads (core/ops/cross_entropy.cc, core/ops/layer_norm.cc). Not recorded by autograd: the
// formulas in autograd/functions/ call these and save what they return.
#pragma once

#include <tuple>

#include "core/tensor.h"

namespace kiln {

/// op::cross_entropy's per-row loss [N] and the logsumexp of each row [N] (logits' dtype).
std::tuple<Tensor, Tensor> cross_entropy_with_lse(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                                  double label_smoothing);

/// op::layer_norm's output (x's shape) with the mean and rstd of each of the M normalized rows
/// ([M], f32 for f16/bf16 x, else x's dtype).
std::tuple<Tensor, Tensor, Tensor> layer_norm_with_stats(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                         int64_t normalized_dims, double eps);

/// layer_norm's statistics dtype for input dtype `t`.
inline DType layer_norm_stats_dtype(DType t) { return t == kFloat16 || t == kBFloat16 ? kFloat32 : t; }

}  // namespace kiln
