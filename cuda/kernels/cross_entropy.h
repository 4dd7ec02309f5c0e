// Launchers of the fused cross-entropy kernels (cuda/kernels/cross_entropy.cu), called by
// cuda/cross_entropy.cc. All operands are contiguous, of one floating type unless said otherwise;
// math in float for the 16-bit types and f32, double for f64 (the same formulas as
// core/cpu/cross_entropy_kernels.cc). Each launcher queues work on `stream` and returns at once.
#pragma once

#include <cstdint>

#include "cuda/kernels/launch.h"

namespace kiln::cuda::kern {

/// Where a cross-entropy kernel reports a target outside [0, C) that is not ignore_index: host
/// memory mapped into the device, read by the host without synchronizing. `state` goes 0 (no
/// error) -> 1 (a row is writing the fields) -> 2 (fields readable); the first bad row wins.
struct CrossEntropyError {
  int state;
  int64_t target, row, classes;
};

/// loss[r] = lse[r] - (1 - s) x[r, t] - s mean(x[r]) (0 where t == ignore_index) and lse[r] of
/// logits [N, C], i64 target [N]. A row with an out-of-range target gets a NaN loss and is
/// reported in *err.
void launch_cross_entropy(ScalarType type, const void* logits, const int64_t* target, void* loss, void* lse, int64_t N,
                          int64_t C, int64_t ignore_index, double smoothing, CrossEntropyError* err,
                          CUstream_st* stream);
/// grad_logits [N, C] = g[r] (exp(x - lse[r]) - (1 - s) onehot(t) - s / C); zero rows where
/// t == ignore_index, NaN rows where t is out of range.
void launch_cross_entropy_backward(ScalarType type, void* grad_logits, const void* grad_loss, const void* logits,
                                   const void* lse, const int64_t* target, int64_t N, int64_t C, int64_t ignore_index,
                                   double smoothing, CUstream_st* stream);

}  // namespace kiln::cuda::kern
