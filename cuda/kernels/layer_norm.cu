// Fused layer norm on CUDA over the rows of contiguous [M, N] x: a warp per row when N is small,
// a block per row otherwise; two-pass mean and (biased) variance, math in float (double for f64).
// The backward's grad_x takes the same row layout; grad_weight / grad_bias are summed over rows
// in two deterministic passes (per-chunk partial sums, then the chunks added up), no atomics.
#include <cstdint>

#include "cuda/kernels/dtypes.cuh"
#include "cuda/kernels/layer_norm.h"
#include "cuda/kernels/row_reduce.cuh"

namespace kiln::cuda::kern {
namespace {

constexpr int64_t kWarpRowMaxN = 1024;  // wider rows take a block each
constexpr int kBlockRowThreads = 512;

template <class T, int kRowThreads>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, T* y, opmath_t<T>* mean, opmath_t<T>* rstd,
                                  int64_t M, int64_t N, opmath_t<T> eps) {
  using Mt = opmath_t<T>;
  int64_t row;
  int lane;
  if (!row_and_lane<kRowThreads>(M, row, lane)) return;
  const T* xr = x + row * N;
  T* yr = y + row * N;
  Mt s = 0;
  for (int64_t i = lane; i < N; i += kRowThreads) s += to_math(xr[i]);
  const Mt mu = row_sum<kRowThreads>(s) / static_cast<Mt>(N);
  Mt v = 0;
  for (int64_t i = lane; i < N; i += kRowThreads) {
    const Mt d = to_math(xr[i]) - mu;
    v += d * d;
  }
  const Mt rs = Mt(1) / sqrt(row_sum<kRowThreads>(v) / static_cast<Mt>(N) + eps);
  for (int64_t i = lane; i < N; i += kRowThreads) {
    Mt o = (to_math(xr[i]) - mu) * rs;
    if (w) o *= to_math(w[i]);
    if (b) o += to_math(b[i]);
    yr[i] = from_math<T>(o);
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

template <class T, int kRowThreads>
__global__ void layer_norm_backward_x_kernel(const T* gy, const T* x, const opmath_t<T>* mean,
                                             const opmath_t<T>* rstd, const T* w, T* gx, int64_t M, int64_t N) {
  using Mt = opmath_t<T>;
  int64_t row;
  int lane;
  if (!row_and_lane<kRowThreads>(M, row, lane)) return;
  const int64_t base = row * N;
  const Mt mu = mean[row], rs = rstd[row];
  Mt s1 = 0, s2 = 0;
  for (int64_t i = lane; i < N; i += kRowThreads) {
    const Mt xh = (to_math(x[base + i]) - mu) * rs;
    const Mt dxh = w ? to_math(gy[base + i]) * to_math(w[i]) : to_math(gy[base + i]);
    s1 += dxh;
    s2 += dxh * xh;
  }
  const Mt m1 = row_sum<kRowThreads>(s1) / static_cast<Mt>(N), m2 = row_sum<kRowThreads>(s2) / static_cast<Mt>(N);
  for (int64_t i = lane; i < N; i += kRowThreads) {
    const Mt xh = (to_math(x[base + i]) - mu) * rs;
    const Mt dxh = w ? to_math(gy[base + i]) * to_math(w[i]) : to_math(gy[base + i]);
    gx[base + i] = from_math<T>(rs * (dxh - m1 - xh * m2));
  }
}

constexpr int kTileCols = 32, kTileRows = 8;

/// Block (column tile, row chunk): partials[chunk][c] = sum over the chunk's rows of gy xhat
/// (first N * chunks values) and of gy (the next N * chunks).
template <class T>
__global__ void layer_norm_params_partial_kernel(const T* gy, const T* x, const opmath_t<T>* mean,
                                                 const opmath_t<T>* rstd, opmath_t<T>* partials, int64_t M, int64_t N,
                                                 int64_t rows_per_chunk, int64_t chunks) {
  using Mt = opmath_t<T>;
  __shared__ Mt sw[kTileRows][kTileCols + 1], sb[kTileRows][kTileCols + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kTileCols + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk, r1 = min(M, r0 + rows_per_chunk);
  Mt aw = 0, ab = 0;
  if (c < N)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kTileRows) {
      const Mt g = to_math(gy[r * N + c]);
      aw += g * (to_math(x[r * N + c]) - mean[r]) * rstd[r];
      ab += g;
    }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y != 0 || c >= N) return;
  for (int k = 1; k < kTileRows; ++k) {
    aw += sw[k][threadIdx.x];
    ab += sb[k][threadIdx.x];
  }
  partials[chunk * N + c] = aw;
  partials[(chunks + chunk) * N + c] = ab;
}

template <class T>
__global__ void layer_norm_params_final_kernel(const opmath_t<T>* partials, T* gw, T* gb, int64_t N,
                                               int64_t chunks) {
  using Mt = opmath_t<T>;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= N) return;
  Mt aw = 0, ab = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    aw += partials[k * N + c];
    ab += partials[(chunks + k) * N + c];
  }
  if (gw) gw[c] = from_math<T>(aw);
  if (gb) gb[c] = from_math<T>(ab);
}

}  // namespace

void launch_layer_norm(ScalarType type, const void* x, const void* w, const void* b, void* y, void* mean, void* rstd,
                       int64_t M, int64_t N, double eps, CUstream_st* stream) {
  dispatch_floating(type, [&]<class T>() {
    using Mt = opmath_t<T>;
    auto run = [&]<int kRowThreads>() {
      layer_norm_kernel<T, kRowThreads><<<row_grid<kRowThreads>(M), row_block<kRowThreads>(), 0, stream>>>(
          static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(y),
          static_cast<Mt*>(mean), static_cast<Mt*>(rstd), M, N, static_cast<Mt>(eps));
    };
    if (N <= kWarpRowMaxN) run.template operator()<32>();
    else run.template operator()<kBlockRowThreads>();
  });
}

void launch_layer_norm_backward_x(ScalarType type, const void* gy, const void* x, const void* mean, const void* rstd,
                                  const void* w, void* gx, int64_t M, int64_t N, CUstream_st* stream) {
  dispatch_floating(type, [&]<class T>() {
    using Mt = opmath_t<T>;
    auto run = [&]<int kRowThreads>() {
      layer_norm_backward_x_kernel<T, kRowThreads><<<row_grid<kRowThreads>(M), row_block<kRowThreads>(), 0, stream>>>(
          static_cast<const T*>(gy), static_cast<const T*>(x), static_cast<const Mt*>(mean),
          static_cast<const Mt*>(rstd), static_cast<const T*>(w), static_cast<T*>(gx), M, N);
    };
    if (N <= kWarpRowMaxN) run.template operator()<32>();
    else run.template operator()<kBlockRowThreads>();
  });
}

void launch_layer_norm_backward_params(ScalarType type, const void* gy, const void* x, const void* mean,
                                       const void* rstd, void* gw, void* gb, void* partials, int64_t M, int64_t N,
                                       CUstream_st* stream) {
  const int64_t chunks = layer_norm_param_chunks(M);
  const int64_t rows_per_chunk = (M + chunks - 1) / chunks;
  dispatch_floating(type, [&]<class T>() {
    using Mt = opmath_t<T>;
    const dim3 grid(static_cast<unsigned>((N + kTileCols - 1) / kTileCols), static_cast<unsigned>(chunks));
    layer_norm_params_partial_kernel<T><<<grid, dim3(kTileCols, kTileRows), 0, stream>>>(
        static_cast<const T*>(gy), static_cast<const T*>(x), static_cast<const Mt*>(mean),
        static_cast<const Mt*>(rstd), static_cast<Mt*>(partials), M, N, rows_per_chunk, chunks);
    layer_norm_params_final_kernel<T><<<static_cast<unsigned>((N + 255) / 256), 256, 0, stream>>>(
        static_cast<const Mt*>(partials), static_cast<T*>(gw), static_cast<T*>(gb), N, chunks);
  });
}

}  // namespace kiln::cuda::kern
