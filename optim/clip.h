// Gradient clipping, as torch.nn.utils.clip_grad_norm_ / clip_grad_value_. Both modify .grad in
// place and skip parameters whose gradient is undefined.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace kiln::optim {

/// The norm of all gradients taken together (as if concatenated into one vector): norm_type p
/// > 0, or infinity (std::numeric_limits<double>::infinity()) for the max-abs norm. When
/// max_norm / (total + 1e-6) < 1 every gradient is multiplied by that coefficient (PyTorch's
/// rule). Returns the total norm before clipping. With error_if_nonfinite, a NaN or infinite
/// total throws instead of scaling.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

/// Clamps every gradient element into [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace kiln::optim
