// Training-mode batch norm with the statistics its backward reads: the forward of the
// op::batch_norm primitive (core/op_table.h), exposed so autograd/functions/batch_norm.cc can
// save what the kernel computed instead of recomputing it.
#pragma once

#include <tuple>

#include "core/tensor.h"

namespace kiln {

/// op::batch_norm's forward: (out, save_mean, save_invstd), the statistics [C] in f32 (f64 for
/// f64 x); running_mean/var updated in place when defined. Validates as the op does; never
/// recorded by autograd.
std::tuple<Tensor, Tensor, Tensor> batch_norm_training(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                       Tensor running_mean, Tensor running_var, double momentum,
                                                       double eps);

/// The dtype of batch norm's saved statistics for input dtype `x`: f64 for f64, else f32.
inline DType batch_norm_stats_dtype(DType x) { return x == kFloat64 ? kFloat64 : kFloat32; }

}  // namespace kiln
