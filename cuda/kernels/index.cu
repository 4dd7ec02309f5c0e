// Indexed reads (index_select, gather) and atomic indexed adds (index_add, scatter_add) on CUDA:
// one thread per element of the walked tensor, the index value turning into an offset along the
// indexed dim. Adds into repeated indices are atomic, so float sums may round in any order.
#include <cstdint>

#include "cuda/kernels/dtypes.cuh"
#include "cuda/kernels/loops.cuh"

namespace kiln::cuda::kern {
namespace {

__device__ __forceinline__ void offsets(const ElementwiseArgs<3>& a, int64_t i, int64_t off[3]) {
  off[0] = off[1] = off[2] = 0;
  for (int d = a.ndim - 1; d >= 0; --d) {
    const int64_t q = i % a.sizes[d];
    i /= a.sizes[d];
#pragma unroll
    for (int k = 0; k < 3; ++k) off[k] += q * a.strides[k][d];
  }
}

template <class U>
__global__ void gather_kernel(ElementwiseArgs<3> a, int64_t dim_stride) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.numel; i += stride) {
    int64_t off[3];
    offsets(a, i, off);
    const int64_t k = static_cast<const int64_t*>(a.data[1])[off[1]];
    static_cast<U*>(a.data[0])[off[0]] = static_cast<const U*>(a.data[2])[off[2] + k * dim_stride];
  }
}

template <class T> __device__ __forceinline__ void atomic_add(T* p, T v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    atomicAdd(reinterpret_cast<unsigned long long*>(p), static_cast<unsigned long long>(v));
  } else if constexpr (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    // No native 16-bit atomics on this architecture: compare-and-swap the enclosing word.
    unsigned int* word = reinterpret_cast<unsigned int*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3});
    const bool high = (reinterpret_cast<uintptr_t>(p) & 2) != 0;
    unsigned int old = *word, assumed;
    do {
      assumed = old;
      const unsigned short bits = high ? static_cast<unsigned short>(assumed >> 16)
                                       : static_cast<unsigned short>(assumed & 0xffffu);
      T cur;
      memcpy(&cur, &bits, 2);
      const T sum = from_math<T>(to_math(cur) + to_math(v));
      unsigned short nb;
      memcpy(&nb, &sum, 2);
      const unsigned int nw = high ? ((assumed & 0xffffu) | (static_cast<unsigned int>(nb) << 16))
                                   : ((assumed & 0xffff0000u) | nb);
      old = atomicCAS(word, assumed, nw);
    } while (assumed != old);
#else
    atomicAdd(p, v);
#endif
  } else {
    atomicAdd(p, v);
  }
}

template <class T>
__global__ void scatter_add_kernel(ElementwiseArgs<3> a, int64_t dim_stride) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.numel; i += stride) {
    int64_t off[3];
    offsets(a, i, off);
    const int64_t k = static_cast<const int64_t*>(a.data[1])[off[1]];
    atomic_add(static_cast<T*>(a.data[0]) + off[0] + k * dim_stride, static_cast<const T*>(a.data[2])[off[2]]);
  }
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

}  // namespace

void launch_index_gather(int elem_bytes, const ElementwiseArgs<3>& a, int64_t dim_stride, CUstream_st* stream) {
  if (a.numel == 0) return;
  switch (elem_bytes) {
    case 1: gather_kernel<uint8_t><<<grid_for(a.numel), kThreads, 0, stream>>>(a, dim_stride); break;
    case 2: gather_kernel<uint16_t><<<grid_for(a.numel), kThreads, 0, stream>>>(a, dim_stride); break;
    case 4: gather_kernel<uint32_t><<<grid_for(a.numel), kThreads, 0, stream>>>(a, dim_stride); break;
    default: gather_kernel<uint64_t><<<grid_for(a.numel), kThreads, 0, stream>>>(a, dim_stride); break;
  }
}

void launch_index_scatter_add(ScalarType type, const ElementwiseArgs<3>& a, int64_t dim_stride, CUstream_st* stream) {
  if (a.numel == 0) return;
  dispatch_all(type, [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>)
      scatter_add_kernel<T><<<grid_for(a.numel), kThreads, 0, stream>>>(a, dim_stride);
  });
}

}  // namespace kiln::cuda::kern
