// Random fills on CUDA (uniform, normal by Box–Muller, randint, bernoulli): one thread per
// element, Philox4x32-10 at counter offset + i, the same words and the same mapping to values as
// core/cpu/random_kernels.cc, so GPU and CPU agree for a seed.
#include <cstdint>

#include "cuda/kernels/dtypes.cuh"

namespace kiln::cuda::kern {
namespace {

struct Words {
  uint32_t w[4];
};

/// Philox4x32-10, as philox4x32 in core/generator.h.
__device__ __forceinline__ Words philox(uint64_t seed, uint64_t counter) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
  for (int r = 0; r < 10; ++r) {
    const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0;
    const uint32_t n2 = hi0 ^ c3 ^ k1;
    c1 = lo1;
    c3 = lo0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

template <class T> constexpr int mantissa_bits() {
  if constexpr (std::is_same_v<T, double>) return 53;
  else if constexpr (std::is_same_v<T, float>) return 24;
  else if constexpr (std::is_same_v<T, __half>) return 11;
  else return 8;  // bf16
}

template <class T> __device__ __forceinline__ double unit_uniform(uint32_t w0, uint32_t w1) {
  constexpr int bits = mantissa_bits<T>();
  if constexpr (bits > 32) {
    const uint64_t r = (static_cast<uint64_t>(w0) << 32 | w1) >> (64 - bits);
    return static_cast<double>(r) * (1.0 / static_cast<double>(uint64_t{1} << bits));
  } else {
    return static_cast<double>(w0 >> (32 - bits)) * (1.0 / static_cast<double>(uint64_t{1} << bits));
  }
}

constexpr int kThreads = 256;
constexpr double kTwoPi = 6.28318530717958647692;

template <class T>
__global__ void uniform_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, double low, double high) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const Words r = philox(seed, offset + static_cast<uint64_t>(i));
  T v = from_math<T>(static_cast<opmath_t<T>>(low + (high - low) * unit_uniform<T>(r.w[0], r.w[1])));
  // Rounding may land on `high` itself; keep the interval half-open.
  if (static_cast<double>(to_math(v)) >= high && high > low) v = from_math<T>(static_cast<opmath_t<T>>(low));
  out[i] = v;
}

template <class T>
__global__ void normal_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, double mean, double std) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const Words r = philox(seed, offset + static_cast<uint64_t>(i));
  if constexpr (std::is_same_v<T, double>) {
    const double u1 =
        static_cast<double>(((static_cast<uint64_t>(r.w[0]) << 32 | r.w[1]) >> 11) + 1) * 0x1.0p-53;
    const double u2 = static_cast<double>((static_cast<uint64_t>(r.w[2]) << 32 | r.w[3]) >> 11) * 0x1.0p-53;
    out[i] = mean + std * (sqrt(-2.0 * log(u1)) * cos(kTwoPi * u2));
  } else {
    const float u1 = static_cast<float>((r.w[0] >> 8) + 1) * 0x1.0p-24f;
    const float u2 = static_cast<float>(r.w[1] >> 8) * 0x1.0p-24f;
    const float v = static_cast<float>(mean) +
                    static_cast<float>(std) * (sqrtf(-2.0f * logf(u1)) * cosf(static_cast<float>(kTwoPi) * u2));
    out[i] = from_math<T>(v);
  }
}

template <class T>
__global__ void randint_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, int64_t low, uint64_t range) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const Words r = philox(seed, offset + static_cast<uint64_t>(i));
  const uint64_t v = (static_cast<uint64_t>(r.w[0]) << 32 | r.w[1]) % range;
  out[i] = from_math<T>(static_cast<opmath_t<T>>(static_cast<int64_t>(static_cast<uint64_t>(low) + v)));
}

template <class T>
__global__ void bernoulli_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, double p) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const Words r = philox(seed, offset + static_cast<uint64_t>(i));
  const bool one = unit_uniform<double>(r.w[0], r.w[1]) < p;
  if constexpr (std::is_same_v<T, bool>) out[i] = one;
  else out[i] = from_math<T>(static_cast<opmath_t<T>>(one ? 1 : 0));
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

void launch_uniform(ScalarType type, void* out, int64_t n, uint64_t seed, uint64_t offset, double low, double high,
                    CUstream_st* stream) {
  if (n == 0) return;
  dispatch_floating(type, [&]<class T>() {
    uniform_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(out), n, seed, offset, low, high);
  });
}

void launch_normal(ScalarType type, void* out, int64_t n, uint64_t seed, uint64_t offset, double mean, double std,
                   CUstream_st* stream) {
  if (n == 0) return;
  dispatch_floating(type, [&]<class T>() {
    normal_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(out), n, seed, offset, mean, std);
  });
}

void launch_randint(ScalarType type, void* out, int64_t n, uint64_t seed, uint64_t offset, int64_t low,
                    int64_t high, CUstream_st* stream) {
  if (n == 0) return;
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  dispatch_all(type, [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>)
      randint_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(out), n, seed, offset, low, range);
  });
}

void launch_bernoulli(ScalarType type, void* out, int64_t n, uint64_t seed, uint64_t offset, double p,
                      CUstream_st* stream) {
  if (n == 0) return;
  dispatch_all(type, [&]<class T>() {
    bernoulli_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(out), n, seed, offset, p);
  });
}

}  // namespace kiln::cuda::kern
