// Launchers of the fused cross-entropy (cuda/kernels/cross_entropy.cu) and layer-norm
// (cuda/kernels/layer_norm.cu) kernels, called by cuda/loss.cc and cuda/norm.cc. All operands are
// contiguous, of one floating type unless said otherwise; math in float for the 16-bit types and
// f32, double for f64 (the same formulas as core/cpu/cross_entropy_kernels.cc and
// core/cpu/layer_norm_kernels.cc). Each launcher queues work on `stream` and returns at once.
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

/// y [M, N] = (x - mean) rstd (* w) (+ b) per row; mean and rstd [M] in the math type (float
/// for 16-bit x); w and b [N] or null.
void launch_layer_norm(ScalarType type, const void* x, const void* w, const void* b, void* y, void* mean, void* rstd,
                       int64_t M, int64_t N, double eps, CUstream_st* stream);
/// gx [M, N] = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = gy (* w), w null
/// meaning 1.
void launch_layer_norm_backward_x(ScalarType type, const void* gy, const void* x, const void* mean, const void* rstd,
                                  const void* w, void* gx, int64_t M, int64_t N, CUstream_st* stream);

/// Row chunks the weight/bias gradients are split into (each block sums its chunk's rows, a
/// second pass adds the chunks up: deterministic, no atomics).
inline int64_t layer_norm_param_chunks(int64_t M) {
  constexpr int64_t kMinRows = 32, kMaxChunks = 256;
  const int64_t c = (M + kMinRows - 1) / kMinRows;
  return c < 1 ? 1 : (c > kMaxChunks ? kMaxChunks : c);
}
/// gw [N] = sum over rows of gy xhat, gb [N] = sum over rows of gy (either may be null).
/// `partials` holds 2 * layer_norm_param_chunks(M) * N values of the math type.
void launch_layer_norm_backward_params(ScalarType type, const void* gy, const void* x, const void* mean,
                                       const void* rstd, void* gw, void* gb, void* partials, int64_t M, int64_t N,
                                       CUstream_st* stream);

}  // namespace kiln::cuda::kern
