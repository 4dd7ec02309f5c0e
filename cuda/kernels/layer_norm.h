// Launchers of the fused layer-norm kernels (cuda/kernels/layer_norm.cu), called by
// cuda/layer_norm.cc. All operands are contiguous, of one floating type unless said otherwise;
// math in float for the 16-bit types and f32, double for f64 (the same formulas as
// core/cpu/layer_norm_kernels.cc). Each launcher queues work on `stream` and returns at once.
#pragma once

#include <cstdint>

#include "cuda/kernels/launch.h"

namespace kiln::cuda::kern {

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
