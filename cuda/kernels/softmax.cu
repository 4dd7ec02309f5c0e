// softmax / log_softmax and their backward on CUDA over the last dim of a contiguous
// [rows, D] tensor: a warp per row (max, then the sum of exponentials, then the outputs), math in
// float (double for f64). The host side (cuda/reduce.cc) moves the softmax dim last first.
#include <cstdint>

#include "cuda/kernels/dtypes.cuh"

namespace kiln::cuda::kern {
namespace {

template <class M> __device__ __forceinline__ M warp_max(M v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const M o = __shfl_xor_sync(0xffffffffu, v, off);
    v = (o > v || o != o) ? o : v;
  }
  return v;
}
template <class M> __device__ __forceinline__ M warp_sum(M v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

template <class T>
__global__ void softmax_kernel(const T* x, T* y, int64_t rows, int64_t D, bool log) {
  using M = opmath_t<T>;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const T* xr = x + row * D;
  T* yr = y + row * D;
  M mx = -INFINITY;
  for (int64_t i = lane; i < D; i += 32) {
    const M v = to_math(xr[i]);
    mx = (v > mx || v != v) ? v : mx;
  }
  mx = warp_max(mx);
  M sum = 0;
  for (int64_t i = lane; i < D; i += 32) sum += exp(to_math(xr[i]) - mx);
  sum = warp_sum(sum);
  if (log) {
    const M lse = mx + ::log(sum);
    for (int64_t i = lane; i < D; i += 32) yr[i] = from_math<T>(to_math(xr[i]) - lse);
  } else {
    const M inv = M(1) / sum;
    for (int64_t i = lane; i < D; i += 32) yr[i] = from_math<T>(exp(to_math(xr[i]) - mx) * inv);
  }
}

/// softmax: gx = y * (gy - sum(gy * y)); log_softmax: gx = gy - exp(y) * sum(gy).
template <class T>
__global__ void softmax_backward_kernel(const T* gy, const T* y, T* gx, int64_t rows, int64_t D, bool log) {
  using M = opmath_t<T>;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const int64_t base = row * D;
  M s = 0;
  for (int64_t i = lane; i < D; i += 32) s += log ? to_math(gy[base + i]) : to_math(gy[base + i]) * to_math(y[base + i]);
  s = warp_sum(s);
  for (int64_t i = lane; i < D; i += 32) {
    const M g = to_math(gy[base + i]), v = to_math(y[base + i]);
    gx[base + i] = from_math<T>(log ? g - exp(v) * s : v * (g - s));
  }
}

constexpr int kThreads = 256, kWarps = kThreads / 32;

}  // namespace

void launch_softmax(ScalarType type, const void* x, void* y, int64_t rows, int64_t D, bool log, CUstream_st* stream) {
  const unsigned grid = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  dispatch_floating(type, [&]<class T>() {
    softmax_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), rows, D, log);
  });
}

void launch_softmax_backward(ScalarType type, const void* gy, const void* y, void* gx, int64_t rows, int64_t D,
                             bool log, CUstream_st* stream) {
  const unsigned grid = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  dispatch_floating(type, [&]<class T>() {
    softmax_backward_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(gy), static_cast<const T*>(y),
                                                              static_cast<T*>(gx), rows, D, log);
  });
}

}  // namespace kiln::cuda::kern
