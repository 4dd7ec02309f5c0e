// The contract of the fused optimizer-step kernel slots (kernels::sgd_step, kernels::adam_step),
// checked once for every backend: a mismatched list would make a fused kernel read or write past
// a tensor (on a GPU, silently), so each backend's slot calls these before touching memory.
#pragma once

#include <vector>

#include "core/op_kinds.h"
#include "core/tensor.h"

namespace kiln {

/// Throws naming "sgd_step" and the offending list/index unless: every parameter is defined,
/// contiguous, of one dtype and device; grads (and bufs, when momentum is used) hold one tensor
/// per parameter of its dtype, device and shape, contiguous; bufs are given exactly when
/// momentum != 0.
void check_sgd_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                    const std::vector<Tensor>& bufs, const SGDStepParams& s);

/// As check_sgd_step for "adam_step": grads, exp_avgs and exp_avg_sqs required;
/// max_exp_avg_sqs given exactly when amsgrad.
void check_adam_step(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                     const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                     const std::vector<Tensor>& max_exp_avg_sqs, const AdamStepParams& s);

}  // namespace kiln
