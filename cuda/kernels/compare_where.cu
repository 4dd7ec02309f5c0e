// compare (bool result), where (select by a bool condition, any dtype by element width),
// arange and mixed precision's gradient unscaling on CUDA, matching core/cpu's kernels.
#include "cuda/kernels/dtypes.cuh"
#include "cuda/kernels/loops.cuh"

namespace kiln::cuda::kern {
namespace {

template <class T> struct CompareF {
  CompareKind kind;
  __device__ bool operator()(T xs, T ys) const {
    const auto x = to_math(xs), y = to_math(ys);
    switch (kind) {
      case CompareKind::eq: return x == y;
      case CompareKind::ne: return x != y;
      case CompareKind::lt: return x < y;
      case CompareKind::le: return x <= y;
      case CompareKind::gt: return x > y;
      default: return x >= y;
    }
  }
};

template <class U>
__global__ void where_kernel(ElementwiseArgs<4> a) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.numel; i += stride) {
    int64_t off[4] = {};
    int64_t rem = i;
    for (int d = a.ndim - 1; d >= 0; --d) {
      const int64_t q = rem % a.sizes[d];
      rem /= a.sizes[d];
#pragma unroll
      for (int k = 0; k < 4; ++k) off[k] += q * a.strides[k][d];
    }
    const bool c = static_cast<const bool*>(a.data[1])[off[1]];
    static_cast<U*>(a.data[0])[off[0]] =
        c ? static_cast<const U*>(a.data[2])[off[2]] : static_cast<const U*>(a.data[3])[off[3]];
  }
}

template <class T>
__global__ void arange_kernel(T* out, int64_t n, double start, double step) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = from_math<T>(static_cast<opmath_t<T>>(start + static_cast<double>(i) * step));
}

template <class T>
__global__ void unscale_kernel(T* g, int64_t n, float* found_inf, opmath_t<T> s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  bool bad = false;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const auto v = to_math(g[i]);
    bad |= !isfinite(v);
    g[i] = from_math<T>(v * s);
  }
  if (__any_sync(0xffffffffu, bad) && threadIdx.x % 32 == 0) *found_inf = 1.0f;  // benign race: all write 1
}

}  // namespace

void launch_non_finite_check_and_unscale(ScalarType type, void* grad, int64_t n, float* found_inf, double inv_scale,
                                         CUstream_st* stream) {
  if (n == 0) return;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < 4096 ? blocks : 4096);
  switch (type) {
    case ScalarType::f16:
      unscale_kernel<__half><<<grid, kThreads, 0, stream>>>(static_cast<__half*>(grad), n, found_inf,
                                                             static_cast<float>(inv_scale));
      break;
    case ScalarType::bf16:
      unscale_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(grad), n, found_inf,
                                                                    static_cast<float>(inv_scale));
      break;
    case ScalarType::f32:
      unscale_kernel<float><<<grid, kThreads, 0, stream>>>(static_cast<float*>(grad), n, found_inf,
                                                            static_cast<float>(inv_scale));
      break;
    case ScalarType::f64:
      unscale_kernel<double><<<grid, kThreads, 0, stream>>>(static_cast<double*>(grad), n, found_inf, inv_scale);
      break;
    default: break;  // refused on the host side
  }
}

void launch_compare(CompareKind kind, ScalarType type, const ElementwiseArgs<3>& a, CUstream_st* stream) {
  dispatch_all(type, [&]<class T>() { run_elementwise<bool, T, 2>(a, CompareF<T>{kind}, stream); });
}

void launch_where(int elem_bytes, const ElementwiseArgs<4>& a, CUstream_st* stream) {
  if (a.numel == 0) return;
  const int64_t blocks = (a.numel + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
  switch (elem_bytes) {
    case 1: where_kernel<uint8_t><<<grid, kThreads, 0, stream>>>(a); break;
    case 2: where_kernel<uint16_t><<<grid, kThreads, 0, stream>>>(a); break;
    case 4: where_kernel<uint32_t><<<grid, kThreads, 0, stream>>>(a); break;
    default: where_kernel<uint64_t><<<grid, kThreads, 0, stream>>>(a); break;
  }
}

void launch_arange(ScalarType type, void* out, int64_t n, double start, double step, CUstream_st* stream) {
  if (n == 0) return;
  const unsigned grid = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  dispatch_all(type, [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>)
      arange_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<T*>(out), n, start, step);
  });
}

}  // namespace kiln::cuda::kern
