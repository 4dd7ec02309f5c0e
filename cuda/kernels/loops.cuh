// The elementwise loops every .cu launcher shares: a contiguous path with 16-byte vector loads
// and stores (when every pointer is aligned for it), and a strided path whose offset calculator
// turns a linear index into each operand's offset (broadcast operands have stride 0): in 32-bit
// arithmetic with division by multiplication when every offset fits, else in 64-bit. Functors
// take and return storage types; they do their own math in float/double (see dtypes.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/kernels/launch.h"

namespace kiln::cuda::kern {

inline constexpr int kThreads = 256;

template <class T, int VEC> struct alignas(sizeof(T) * VEC) Vec {
  T v[VEC];
};

template <class F, class Out, class In, int NIN>
__device__ __forceinline__ Out call(const F& f, const In* v) {
  if constexpr (NIN == 0) return f();
  else if constexpr (NIN == 1) return f(v[0]);
  else return f(v[0], v[1]);
}

template <class Out, class In, int NIN> struct Ptrs {
  Out* out;
  const In* in[NIN > 0 ? NIN : 1];
};

template <int VEC, class Out, class In, int NIN, class F>
__global__ void contiguous_kernel(int64_t n, Ptrs<Out, In, NIN> p, F f) {
  const int64_t base = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  if (base + VEC <= n) {
    In x[NIN > 0 ? NIN : 1][VEC];
#pragma unroll
    for (int k = 0; k < NIN; ++k) {
      Vec<In, VEC> v = *reinterpret_cast<const Vec<In, VEC>*>(p.in[k] + base);
#pragma unroll
      for (int j = 0; j < VEC; ++j) x[k][j] = v.v[j];
    }
    Vec<Out, VEC> o;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      In args[NIN > 0 ? NIN : 1];
#pragma unroll
      for (int k = 0; k < NIN; ++k) args[k] = x[k][j];
      o.v[j] = call<F, Out, In, NIN>(f, args);
    }
    *reinterpret_cast<Vec<Out, VEC>*>(p.out + base) = o;
  } else {
    for (int64_t i = base; i < n; ++i) {
      In args[NIN > 0 ? NIN : 1];
      for (int k = 0; k < NIN; ++k) args[k] = p.in[k][i];
      p.out[i] = call<F, Out, In, NIN>(f, args);
    }
  }
}

template <class Out, class In, int NIN, class F>
__global__ void strided_kernel(ElementwiseArgs<NIN + 1> a, F f) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.numel; i += stride) {
    int64_t off[NIN + 1] = {};
    int64_t rem = i;
    for (int d = a.ndim - 1; d >= 0; --d) {
      const int64_t q = rem % a.sizes[d];
      rem /= a.sizes[d];
#pragma unroll
      for (int k = 0; k <= NIN; ++k) off[k] += q * a.strides[k][d];
    }
    In args[NIN > 0 ? NIN : 1];
#pragma unroll
    for (int k = 0; k < NIN; ++k) args[k] = static_cast<const In*>(a.data[k + 1])[off[k + 1]];
    static_cast<Out*>(a.data[0])[off[0]] = call<F, Out, In, NIN>(f, args);
  }
}

/// n / d for 0 <= n < 2^31 with a multiply-high, an add and a shift instead of a division (as
/// PyTorch's IntDivider): s = ceil(log2 d), m = floor(2^32 (2^s - d) / d) + 1, d >= 1.
struct FastDiv {
  uint32_t d = 1, m = 1, s = 0;
  FastDiv() = default;
  explicit FastDiv(uint32_t divisor) : d(divisor) {
    while ((uint64_t{1} << s) < d) ++s;
    m = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << s) - d)) / d + 1);
  }
  __device__ __forceinline__ uint32_t operator()(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
};

/// ElementwiseArgs in 32-bit offsets (every offset and the element count below 2^31, strides
/// non-negative), with each size's FastDiv.
template <int N> struct StridedArgs32 {
  int ndim = 0;
  uint32_t numel = 0;
  FastDiv sizes[kMaxDims];
  uint32_t strides[N][kMaxDims] = {};
  void* data[N] = {};
};

template <int N> bool fits_32bit(const ElementwiseArgs<N>& a) {
  constexpr int64_t kLimit = int64_t{1} << 31;
  if (a.numel >= kLimit) return false;
  for (int k = 0; k < N; ++k) {
    int64_t last = 0;
    for (int d = 0; d < a.ndim; ++d) {
      if (a.strides[k][d] < 0) return false;
      last += (a.sizes[d] - 1) * a.strides[k][d];
    }
    if (last >= kLimit) return false;
  }
  return true;
}

template <int N> StridedArgs32<N> to_32bit(const ElementwiseArgs<N>& a) {
  StridedArgs32<N> b;
  b.ndim = a.ndim;
  b.numel = static_cast<uint32_t>(a.numel);
  for (int d = 0; d < a.ndim; ++d) b.sizes[d] = FastDiv(static_cast<uint32_t>(a.sizes[d]));
  for (int k = 0; k < N; ++k) {
    b.data[k] = a.data[k];
    for (int d = 0; d < a.ndim; ++d) b.strides[k][d] = static_cast<uint32_t>(a.strides[k][d]);
  }
  return b;
}

/// The strided path in 32-bit offsets: kPer elements per thread, a block's threads on
/// neighbouring elements (coalesced along the innermost dim), every load issued before the
/// first store.
template <class Out, class In, int NIN, class F>
__global__ void strided32_kernel(StridedArgs32<NIN + 1> a, F f) {
  constexpr int kPer = 4;
  const uint32_t base = blockIdx.x * (blockDim.x * kPer) + threadIdx.x;
  In args[kPer][NIN > 0 ? NIN : 1];
  uint32_t out_off[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    const uint32_t i = base + j * blockDim.x;
    uint32_t off[NIN + 1] = {};
    if (i < a.numel) {
      uint32_t rem = i;
      for (int d = a.ndim - 1; d >= 0; --d) {
        const uint32_t q = a.sizes[d](rem);
        const uint32_t r = rem - q * a.sizes[d].d;
        rem = q;
#pragma unroll
        for (int k = 0; k <= NIN; ++k) off[k] += r * a.strides[k][d];
      }
#pragma unroll
      for (int k = 0; k < NIN; ++k) args[j][k] = static_cast<const In*>(a.data[k + 1])[off[k + 1]];
    }
    out_off[j] = off[0];
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j)
    if (base + j * blockDim.x < a.numel)
      static_cast<Out*>(a.data[0])[out_off[j]] = call<F, Out, In, NIN>(f, args[j]);
}

inline bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

/// Runs f over every element of `a` on `stream` (In is unused when NIN is 0).
template <class Out, class In, int NIN, class F>
void run_elementwise(const ElementwiseArgs<NIN + 1>& a, F f, cudaStream_t stream) {
  const int64_t n = a.numel;
  if (n == 0) return;
  if (a.contiguous) {
    constexpr size_t kWidest = sizeof(Out) > sizeof(In) || NIN == 0 ? sizeof(Out) : sizeof(In);
    constexpr int VEC = static_cast<int>(16 / kWidest) > 0 ? static_cast<int>(16 / kWidest) : 1;
    Ptrs<Out, In, NIN> p;
    p.out = static_cast<Out*>(a.data[0]);
    bool ok = aligned(p.out, sizeof(Out) * VEC);
    for (int k = 0; k < NIN; ++k) {
      p.in[k] = static_cast<const In*>(a.data[k + 1]);
      ok = ok && aligned(p.in[k], sizeof(In) * VEC);
    }
    if (ok) {
      const int64_t blocks = (n + int64_t{kThreads} * VEC - 1) / (int64_t{kThreads} * VEC);
      contiguous_kernel<VEC, Out, In, NIN><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(n, p, f);
    } else {
      const int64_t blocks = (n + kThreads - 1) / kThreads;
      contiguous_kernel<1, Out, In, NIN><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(n, p, f);
    }
  } else if (fits_32bit(a)) {
    const int64_t blocks = (n + int64_t{kThreads} * 4 - 1) / (int64_t{kThreads} * 4);
    strided32_kernel<Out, In, NIN><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(to_32bit(a), f);
  } else {
    // Grid-stride: enough blocks to fill the GPU, each looping.
    const int64_t blocks = (n + kThreads - 1) / kThreads;
    const unsigned grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
    strided_kernel<Out, In, NIN><<<grid, kThreads, 0, stream>>>(a, f);
  }
}

}  // namespace kiln::cuda::kern
