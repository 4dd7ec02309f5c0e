// The fused optimizer updates' launchers (cuda/kernels/optim.cu), called by cuda/optim.cc: one
// step over a list of contiguous tensors of one floating type on one device, multi-tensor
// applied (a launch covers many tensors, each cut into chunks). Same formulas as
// core/cpu/optim_kernels.cc; math in float for the 16-bit types and f32, double for f64.
#pragma once

#include <cstdint>

#include "core/op_kinds.h"
#include "cuda/kernels/launch.h"

namespace kiln::cuda::kern {

/// Elements one block updates (one chunk of one tensor).
inline constexpr int64_t kOptimChunk = 65536;

/// SGD over n tensors: params[i], grads[i] (and bufs[i] when bufs is non-null, i.e. momentum
/// != 0) hold numels[i] elements of `type`. `first` seeds the buffers with the gradient.
void launch_sgd_step(ScalarType type, int n, void* const* params, const void* const* grads, void* const* bufs,
                     const int64_t* numels, const SGDStepParams& s, bool first, CUstream_st* stream);

/// Adam/AdamW over n tensors at one step count; max_exp_avg_sqs is null unless s.amsgrad.
void launch_adam_step(ScalarType type, int n, void* const* params, const void* const* grads, void* const* exp_avgs,
                      void* const* exp_avg_sqs, void* const* max_exp_avg_sqs, const int64_t* numels,
                      const AdamStepParams& s, CUstream_st* stream);

}  // namespace kiln::cuda::kern
