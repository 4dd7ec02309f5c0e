// Sums and maxima over one row shared by kRowThreads threads: a warp (kRowThreads == 32, several
// rows per block) or a whole block (one row per block, up to 1024 threads). Every thread of the
// row gets the result. Used by the fused cross-entropy and layer-norm kernels.
#pragma once

namespace kiln::cuda::kern {

template <class M> __device__ __forceinline__ M warp_sum_all(M v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

/// NaN wins, as the CPU's max.
template <class M> __device__ __forceinline__ M nan_max(M a, M b) { return (b > a || b != b) ? b : a; }

template <class M> __device__ __forceinline__ M warp_max_all(M v) {
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v = nan_max(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

/// Combines the warps' values of a block-wide row through shared memory (32 slots of 8 bytes).
template <int kRowThreads, bool kMax, class M> __device__ __forceinline__ M row_combine(M v) {
  v = kMax ? warp_max_all(v) : warp_sum_all(v);
  if constexpr (kRowThreads > 32) {
    __shared__ double slots[32];
    M* s = reinterpret_cast<M*>(slots);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();  // the slots may still be read by a previous combine
    if (lane == 0) s[warp] = v;
    __syncthreads();
    v = lane < kRowThreads / 32 ? s[lane] : (kMax ? M(-INFINITY) : M(0));
    v = kMax ? warp_max_all(v) : warp_sum_all(v);
  }
  return v;
}

template <int kRowThreads, class M> __device__ __forceinline__ M row_sum(M v) { return row_combine<kRowThreads, false>(v); }
template <int kRowThreads, class M> __device__ __forceinline__ M row_max(M v) { return row_combine<kRowThreads, true>(v); }

/// This thread's row and its index within the row; false when the row is past the end (only
/// possible for warp rows, whose warp then leaves as a whole).
template <int kRowThreads> __device__ __forceinline__ bool row_and_lane(int64_t rows, int64_t& row, int& lane) {
  if constexpr (kRowThreads == 32) {
    row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    lane = threadIdx.x % 32;
  } else {
    row = blockIdx.x;
    lane = threadIdx.x;
  }
  return row < rows;
}

/// Threads per block for warp rows, and the grid for `rows` rows of kRowThreads threads.
inline constexpr int kWarpRowBlock = 256;
template <int kRowThreads> inline unsigned row_grid(int64_t rows) {
  if constexpr (kRowThreads == 32) return static_cast<unsigned>((rows + kWarpRowBlock / 32 - 1) / (kWarpRowBlock / 32));
  else return static_cast<unsigned>(rows);
}
template <int kRowThreads> inline unsigned row_block() { return kRowThreads == 32 ? kWarpRowBlock : kRowThreads; }

}  // namespace kiln::cuda::kern
