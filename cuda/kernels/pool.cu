// max_pool2d / avg_pool2d and their backward on CUDA, one thread per output (forward, avg
// backward: per input pixel) with the CPU's window order, NaN rule and divisors; max backward
// adds each output's gradient at its index atomically (in f32 for 16-bit types).
#include <cstdint>

#include "cuda/kernels/dtypes.cuh"

namespace kiln::cuda::kern {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
}

template <class T>
__global__ void max_pool_kernel(const T* x, T* out, int64_t* indices, PoolShape s, Pool2dParams p) {
  using A = opmath_t<T>;
  const int64_t total = s.planes * s.OH * s.OW;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t ow = i % s.OW, oh = (i / s.OW) % s.OH, pl = i / (s.OW * s.OH);
    const int64_t hs = oh * p.stride[0] - p.padding[0], ws = ow * p.stride[1] - p.padding[1];
    const T* xp = x + pl * s.H * s.W;
    A best = -INFINITY;
    int64_t at = -1;
    for (int64_t i = 0; i < p.kernel[0]; ++i) {  // window elements `dilation` apart
      const int64_t h = hs + i * p.dilation[0];
      if (h < 0 || h >= s.H) continue;
      for (int64_t j = 0; j < p.kernel[1]; ++j) {
        const int64_t w = ws + j * p.dilation[1];
        if (w < 0 || w >= s.W) continue;
        const A v = to_math(xp[h * s.W + w]);
        if (at < 0 || v > best || v != v) {  // a later element wins if larger or NaN
          best = v;
          at = h * s.W + w;
        }
      }
    }
    out[i] = from_math<T>(best);
    indices[i] = at;
  }
}

template <class T, class Acc>
__global__ void max_pool_backward_kernel(const T* grad_out, const int64_t* indices, Acc* grad_x, int64_t planes,
                                         int64_t in, int64_t outn) {
  const int64_t total = planes * outn;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t pl = i / outn;
    atomicAdd(grad_x + pl * in + indices[i], static_cast<Acc>(to_math(grad_out[i])));
  }
}

__device__ __forceinline__ int64_t avg_divisor(int64_t hs, int64_t ws, const PoolShape& s, const Pool2dParams& p) {
  int64_t he = hs + p.kernel[0] < s.H + p.padding[0] ? hs + p.kernel[0] : s.H + p.padding[0];
  int64_t we = ws + p.kernel[1] < s.W + p.padding[1] ? ws + p.kernel[1] : s.W + p.padding[1];
  if (p.count_include_pad) return (he - hs) * (we - ws);
  hs = hs > 0 ? hs : 0;
  ws = ws > 0 ? ws : 0;
  he = he < s.H ? he : s.H;
  we = we < s.W ? we : s.W;
  return (he - hs) * (we - ws);
}

template <class T>
__global__ void avg_pool_kernel(const T* x, T* out, PoolShape s, Pool2dParams p) {
  using A = opmath_t<T>;
  const int64_t total = s.planes * s.OH * s.OW;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t ow = i % s.OW, oh = (i / s.OW) % s.OH, pl = i / (s.OW * s.OH);
    const int64_t hs = oh * p.stride[0] - p.padding[0], ws = ow * p.stride[1] - p.padding[1];
    const int64_t h0 = hs > 0 ? hs : 0, h1 = hs + p.kernel[0] < s.H ? hs + p.kernel[0] : s.H;
    const int64_t w0 = ws > 0 ? ws : 0, w1 = ws + p.kernel[1] < s.W ? ws + p.kernel[1] : s.W;
    const T* xp = x + pl * s.H * s.W;
    A sum = 0;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) sum += to_math(xp[h * s.W + w]);
    const int64_t div = avg_divisor(hs, ws, s, p);
    out[i] = from_math<T>(div > 0 ? sum / static_cast<A>(div) : A(0));
  }
}

/// One thread per input pixel: the outputs whose windows cover it, in the CPU's order.
template <class T>
__global__ void avg_pool_backward_kernel(const T* grad_out, T* grad_x, PoolShape s, Pool2dParams p) {
  using A = opmath_t<T>;
  const int64_t total = s.planes * s.H * s.W;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t kh = p.kernel[0], kw = p.kernel[1], sh = p.stride[0], sw = p.stride[1];
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t w = i % s.W, h = (i / s.W) % s.H, pl = i / (s.W * s.H);
    // Outputs oh with oh*sh - ph <= h < oh*sh - ph + kh.
    const int64_t hp = h + p.padding[0], wp = w + p.padding[1];
    int64_t oh0 = hp - kh + 1 > 0 ? (hp - kh + 1 + sh - 1) / sh : 0;
    int64_t oh1 = hp / sh + 1 < s.OH ? hp / sh + 1 : s.OH;
    int64_t ow0 = wp - kw + 1 > 0 ? (wp - kw + 1 + sw - 1) / sw : 0;
    int64_t ow1 = wp / sw + 1 < s.OW ? wp / sw + 1 : s.OW;
    const T* gp = grad_out + pl * s.OH * s.OW;
    A acc = 0;
    for (int64_t oh = oh0; oh < oh1; ++oh)
      for (int64_t ow = ow0; ow < ow1; ++ow) {
        const int64_t div = avg_divisor(oh * sh - p.padding[0], ow * sw - p.padding[1], s, p);
        if (div > 0) acc += to_math(gp[oh * s.OW + ow]) / static_cast<A>(div);
      }
    grad_x[i] = from_math<T>(acc);
  }
}

}  // namespace

void launch_max_pool2d(ScalarType type, const void* x, void* out, int64_t* indices, const PoolShape& s,
                       const Pool2dParams& p, CUstream_st* stream) {
  const int64_t n = s.planes * s.OH * s.OW;
  if (n == 0) return;
  dispatch_floating(type, [&]<class T>() {
    max_pool_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(out), indices,
                                                             s, p);
  });
}

void launch_max_pool2d_backward(ScalarType type, const void* grad_out, const int64_t* indices, void* grad_x_acc,
                                int64_t planes, int64_t in_per_plane, int64_t out_per_plane, CUstream_st* stream) {
  const int64_t n = planes * out_per_plane;
  if (n == 0) return;
  dispatch_floating(type, [&]<class T>() {
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    max_pool_backward_kernel<T, Acc><<<grid_for(n), kThreads, 0, stream>>>(
        static_cast<const T*>(grad_out), indices, static_cast<Acc*>(grad_x_acc), planes, in_per_plane, out_per_plane);
  });
}

void launch_avg_pool2d(ScalarType type, const void* x, void* out, const PoolShape& s, const Pool2dParams& p,
                       CUstream_st* stream) {
  const int64_t n = s.planes * s.OH * s.OW;
  if (n == 0) return;
  dispatch_floating(type, [&]<class T>() {
    avg_pool_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(out), s, p);
  });
}

void launch_avg_pool2d_backward(ScalarType type, const void* grad_out, void* grad_x, const PoolShape& s,
                                const Pool2dParams& p, CUstream_st* stream) {
  const int64_t n = s.planes * s.H * s.W;
  if (n == 0) return;
  dispatch_floating(type, [&]<class T>() {
    avg_pool_backward_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(grad_out),
                                                                      static_cast<T*>(grad_x), s, p);
  });
}

}  // namespace kiln::cuda::kern
