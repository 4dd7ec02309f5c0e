// The fused layer-norm primitive's forward with the statistics its backward reads
// (core/ops/layer_norm.cc). Not recorded by autograd: autograd/functions/layer_norm.cc calls it
// and saves what it returns.
#pragma once

#include <tuple>

#include "core/tensor.h"

namespace kiln {

/// op::layer_norm's output (x's shape) with the mean and rstd of each of the M normalized rows
/// ([M], f32 for f16/bf16 x, else x's dtype).
std::tuple<Tensor, Tensor, Tensor> layer_norm_with_stats(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                         int64_t normalized_dims, double eps);

/// layer_norm's statistics dtype for input dtype `t`.
inline DType layer_norm_stats_dtype(DType t) { return t == kFloat16 || t == kBFloat16 ? kFloat32 : t; }

}  // namespace kiln
