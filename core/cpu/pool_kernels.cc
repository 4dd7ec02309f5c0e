// CPU max/avg 2-D pooling, forward and backward, in parallel over the N * C planes (each plane's
// gradient is written by one thread only, so no atomics). Windows follow PyTorch: max pooling
// treats padding as -inf and propagates NaN; avg pooling divides by the window clipped to the
// padded input (count_include_pad) or to the input. 16-bit floats compute in float.
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/kernels.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

struct PoolGeometry {
  int64_t planes, H, W, OH, OW;
  const Pool2dParams& p;
  PoolGeometry(const Tensor& in, const Tensor& out, const Pool2dParams& params)
      : planes(in.size(0) * in.size(1)), H(in.size(2)), W(in.size(3)), OH(out.size(2)), OW(out.size(3)),
        p(params) {}
  /// Planes per parallel task: enough that each task touches ~kGrainSize elements.
  int64_t grain() const { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(H * W + OH * OW, 1)); }
};

/// best[i], arg[i] = max(best[i], src[i * stride]) and its index base + i * stride, for i in
/// [lo, hi). A select over the whole row (no data-dependent branch: `v > best` on real data is a
/// coin flip no predictor learns), which the compiler vectorises. NaN counts as the maximum
/// (the last one wins, as in PyTorch).
template <class T>
inline void max_update(const T* __restrict src, int64_t stride, int64_t base, opmath_t<T>* __restrict best,
                       int64_t* __restrict arg, int64_t lo, int64_t hi) {
  using A = opmath_t<T>;
  for (int64_t i = lo; i < hi; ++i) {
    const A v = static_cast<A>(src[i * stride]);
    const A b = best[i];
    const bool take = (v > b) | (v != v);
    best[i] = take ? v : b;
    arg[i] = take ? base + i * stride : arg[i];
  }
}

/// The 2x2/2 max-pool of one output row for float: 8 outputs per step with AVX2 (the
/// comparisons are coin flips on real activations, so branches would mispredict half the time).
/// Same order and NaN rule as the scalar loop. Returns how many outputs it wrote.
inline int64_t max_pool_2x2_row_avx2(const float* r0, const float* r1, float* out, int64_t* idx, int64_t ow_end,
                                     int64_t row0, int64_t W) {
#if defined(__AVX2__)
  int64_t ow = 0;
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  auto step = [&](int64_t ow) {
    // Deinterleave 16 consecutive inputs of each row into even (left) and odd (right) columns.
    auto split = [&](const float* r, __m256& left, __m256& right) {
      __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(r + 2 * ow), even);
      __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(r + 2 * ow + 8), even);
      left = _mm256_permute2f128_ps(lo, hi, 0x20);
      right = _mm256_permute2f128_ps(lo, hi, 0x31);
    };
    __m256 a, b, c, d;
    split(r0, a, b);
    split(r1, c, d);
    __m256 m = a;
    __m256i off = _mm256_setzero_si256();
    auto take = [&](__m256 v, int32_t o) {
      __m256 t = _mm256_or_ps(_mm256_cmp_ps(v, m, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      m = _mm256_blendv_ps(m, v, t);
      off = _mm256_castps_si256(
          _mm256_blendv_ps(_mm256_castsi256_ps(off), _mm256_castsi256_ps(_mm256_set1_epi32(o)), t));
    };
    take(b, 1);
    take(c, static_cast<int32_t>(W));
    take(d, static_cast<int32_t>(W + 1));
    _mm256_storeu_ps(out + ow, m);
    // index = row0 + 2 * (ow + lane) + off, widened to i64.
    __m256i rel = _mm256_add_epi32(_mm256_slli_epi32(lane, 1), off);
    __m256i base = _mm256_set1_epi64x(row0 + 2 * ow);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + ow),
                        _mm256_add_epi64(base, _mm256_cvtepi32_epi64(_mm256_castsi256_si128(rel))));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + ow + 4),
                        _mm256_add_epi64(base, _mm256_cvtepi32_epi64(_mm256_extracti128_si256(rel, 1))));
  };
  for (; ow + 8 <= ow_end; ow += 8) step(ow);
  // A ragged end is redone as the last full 8 (rewriting a few outputs with the same values).
  if (ow < ow_end && ow_end >= 8) {
    step(ow_end - 8);
    ow = ow_end;
  }
  return ow;
#else
  return 0;
#endif
}

/// The same for rows of 4 to 7 outputs (the CNN's 14x14 -> 7x7 pooling), 4 outputs per step
/// with 128-bit vectors, starting at output `ow`. Returns how far it got.
inline int64_t max_pool_2x2_row_sse(const float* r0, const float* r1, float* out, int64_t* idx, int64_t ow,
                                    int64_t ow_end, int64_t row0, int64_t W) {
#if defined(__AVX2__)
  auto step = [&](int64_t ow) {
    auto split = [&](const float* r, __m128& left, __m128& right) {
      const __m128 lo = _mm_loadu_ps(r + 2 * ow), hi = _mm_loadu_ps(r + 2 * ow + 4);
      left = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
      right = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
    };
    __m128 a, b, c, d;
    split(r0, a, b);
    split(r1, c, d);
    __m128 m = a;
    __m128i off = _mm_setzero_si128();
    auto take = [&](__m128 v, int32_t o) {
      const __m128 t = _mm_or_ps(_mm_cmp_ps(v, m, _CMP_GT_OQ), _mm_cmp_ps(v, v, _CMP_UNORD_Q));
      m = _mm_blendv_ps(m, v, t);
      off = _mm_castps_si128(_mm_blendv_ps(_mm_castsi128_ps(off), _mm_castsi128_ps(_mm_set1_epi32(o)), t));
    };
    take(b, 1);
    take(c, static_cast<int32_t>(W));
    take(d, static_cast<int32_t>(W + 1));
    _mm_storeu_ps(out + ow, m);
    const __m128i rel = _mm_add_epi32(_mm_setr_epi32(0, 2, 4, 6), off);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(idx + ow),
                        _mm256_add_epi64(_mm256_set1_epi64x(row0 + 2 * ow), _mm256_cvtepi32_epi64(rel)));
  };
  for (; ow + 4 <= ow_end; ow += 4) step(ow);
  if (ow < ow_end && ow_end >= 4) {  // ragged end: redo the last full 4
    step(ow_end - 4);
    ow = ow_end;
  }
#endif
  return ow;
}

/// Dilated windows: every window element visited directly (the fast paths below assume adjacent
/// elements). Row-major window order; a later element wins if larger or NaN.
template <class T> void max_pool_dilated(Tensor& out, Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  using A = opmath_t<T>;
  const PoolGeometry g(x, out, p);
  const T* px = x.data_ptr<T>();
  T* po = out.data_ptr<T>();
  int64_t* pi = indices.data_ptr<int64_t>();
  parallel_for(0, g.planes, g.grain(), [&](int64_t plo, int64_t phi) {
    for (int64_t pl = plo; pl < phi; ++pl) {
      const T* xp = px + pl * g.H * g.W;
      for (int64_t oh = 0; oh < g.OH; ++oh)
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          A best = -std::numeric_limits<A>::infinity();
          int64_t at = -1;
          for (int64_t i = 0; i < p.kernel[0]; ++i) {
            const int64_t h = oh * p.stride[0] - p.padding[0] + i * p.dilation[0];
            if (h < 0 || h >= g.H) continue;
            for (int64_t j = 0; j < p.kernel[1]; ++j) {
              const int64_t w = ow * p.stride[1] - p.padding[1] + j * p.dilation[1];
              if (w < 0 || w >= g.W) continue;
              const A v = static_cast<A>(xp[h * g.W + w]);
              if (at < 0 || v > best || v != v) {
                best = v;
                at = h * g.W + w;
              }
            }
          }
          po[(pl * g.OH + oh) * g.OW + ow] = static_cast<T>(best);
          pi[(pl * g.OH + oh) * g.OW + ow] = at;
        }
    }
  });
}

template <class T> void max_pool_forward(Tensor& out, Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  using A = opmath_t<T>;
  if (p.dilation[0] != 1 || p.dilation[1] != 1) return max_pool_dilated<T>(out, indices, x, p);
  const PoolGeometry g(x, out, p);
  const T* px = x.data_ptr<T>();
  T* po = out.data_ptr<T>();
  int64_t* pi = indices.data_ptr<int64_t>();
  const int64_t kh = p.kernel[0], kw = p.kernel[1], sh = p.stride[0], sw = p.stride[1];
  const int64_t ph = p.padding[0], pw = p.padding[1];
  // Per kernel column j, the output columns whose input column lies inside the image.
  std::vector<int64_t> lo(kw), hi(kw);
  for (int64_t j = 0; j < kw; ++j) {
    const int64_t off = j - pw;
    lo[j] = off >= 0 ? 0 : (-off + sw - 1) / sw;
    hi[j] = std::max(lo[j], std::min(g.OW, off >= g.W ? 0 : (g.W - 1 - off) / sw + 1));
  }
  if (kh == 2 && kw == 2 && sh == 2 && sw == 2 && ph == 0 && pw == 0 && 2 * g.OH <= g.H && 2 * g.OW <= g.W) {
    // The common 2x2/2 window with every window inside the image: four loads per output.
    parallel_for(0, g.planes, g.grain(), [&](int64_t plo, int64_t phi) {
      for (int64_t pl = plo; pl < phi; ++pl) {
        const T* xp = px + pl * g.H * g.W;
        T* op = po + pl * g.OH * g.OW;
        int64_t* ip = pi + pl * g.OH * g.OW;
        for (int64_t oh = 0; oh < g.OH; ++oh) {
          const T* __restrict r0 = xp + 2 * oh * g.W;
          const T* __restrict r1 = r0 + g.W;
          T* __restrict o = op + oh * g.OW;
          int64_t* __restrict idx = ip + oh * g.OW;
          const int64_t row0 = 2 * oh * g.W;
          int64_t ow = 0;
          if constexpr (std::is_same_v<T, float>) {
            ow = max_pool_2x2_row_avx2(r0, r1, o, idx, g.OW, row0, g.W);
            ow = max_pool_2x2_row_sse(r0, r1, o, idx, ow, g.OW, row0, g.W);
          }
          for (; ow < g.OW; ++ow) {
            // Row-major window order; a later element wins only if larger or NaN (as PyTorch).
            // Selects, not branches: on real activations the comparisons are coin flips.
            A m = static_cast<A>(r0[2 * ow]);
            int64_t at = row0 + 2 * ow;
            const A v1 = static_cast<A>(r0[2 * ow + 1]), v2 = static_cast<A>(r1[2 * ow]),
                    v3 = static_cast<A>(r1[2 * ow + 1]);
            const bool t1 = (v1 > m) | (v1 != v1);
            m = t1 ? v1 : m;
            at = t1 ? row0 + 2 * ow + 1 : at;
            const bool t2 = (v2 > m) | (v2 != v2);
            m = t2 ? v2 : m;
            at = t2 ? row0 + g.W + 2 * ow : at;
            const bool t3 = (v3 > m) | (v3 != v3);
            m = t3 ? v3 : m;
            at = t3 ? row0 + g.W + 2 * ow + 1 : at;
            o[ow] = static_cast<T>(m);
            idx[ow] = at;
          }
        }
      }
    });
    return;
  }
  parallel_for(0, g.planes, g.grain(), [&](int64_t plo, int64_t phi) {
    // One output row at a time, window element by window element.
    std::vector<A> best(g.OW);
    std::vector<int64_t> arg(g.OW);
    for (int64_t pl = plo; pl < phi; ++pl) {
      const T* xp = px + pl * g.H * g.W;
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        const int64_t h0 = std::max<int64_t>(oh * sh - ph, 0), h1 = std::min(oh * sh - ph + kh, g.H);
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          best[ow] = -std::numeric_limits<A>::infinity();
          arg[ow] = h0 * g.W + std::max<int64_t>(ow * sw - pw, 0);
        }
        A* b = best.data();
        int64_t* a = arg.data();
        for (int64_t h = h0; h < h1; ++h) {
          const T* row = xp + h * g.W;
          for (int64_t j = 0; j < kw; ++j) {
            const int64_t off = j - pw;
            max_update<T>(row + off, sw, h * g.W + off, b, a, lo[j], hi[j]);
          }
        }
        T* op = po + (pl * g.OH + oh) * g.OW;
        int64_t* ip = pi + (pl * g.OH + oh) * g.OW;
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          op[ow] = static_cast<T>(b[ow]);
          ip[ow] = a[ow];
        }
      }
    }
  });
}

template <class T> void max_pool_backward(Tensor& grad_x, const Tensor& grad_out, const Tensor& indices) {
  using A = opmath_t<T>;
  const int64_t planes = grad_x.size(0) * grad_x.size(1), in = grad_x.size(2) * grad_x.size(3);
  const int64_t outn = grad_out.size(2) * grad_out.size(3);
  const T* pg = grad_out.data_ptr<T>();
  const int64_t* pi = indices.data_ptr<int64_t>();
  T* px = grad_x.data_ptr<T>();
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(in + outn, 1));
  parallel_for(0, planes, grain, [&](int64_t lo, int64_t hi) {
    // f32/f64 accumulate in the output plane itself; 16-bit types in an f32 plane copied after.
    std::vector<A> acc(std::is_same_v<A, T> ? 0 : in);
    for (int64_t pl = lo; pl < hi; ++pl) {
      T* xp = px + pl * in;
      A* ap = std::is_same_v<A, T> ? reinterpret_cast<A*>(xp) : acc.data();
      std::fill(ap, ap + in, A(0));
      const T* gp = pg + pl * outn;
      const int64_t* ip = pi + pl * outn;
      for (int64_t o = 0; o < outn; ++o) ap[ip[o]] += static_cast<A>(gp[o]);
      if constexpr (!std::is_same_v<A, T>)
        for (int64_t i = 0; i < in; ++i) xp[i] = static_cast<T>(acc[i]);
    }
  });
}

/// The divisor of avg pooling's window starting at (hs, ws) (unclipped, may be negative).
inline int64_t avg_divisor(int64_t hs, int64_t ws, const PoolGeometry& g) {
  const Pool2dParams& p = g.p;
  int64_t he = std::min(hs + p.kernel[0], g.H + p.padding[0]);
  int64_t we = std::min(ws + p.kernel[1], g.W + p.padding[1]);
  if (p.count_include_pad) return (he - hs) * (we - ws);
  hs = std::max<int64_t>(hs, 0);
  ws = std::max<int64_t>(ws, 0);
  he = std::min(he, g.H);
  we = std::min(we, g.W);
  return (he - hs) * (we - ws);
}

template <class T> void avg_pool_forward(Tensor& out, const Tensor& x, const Pool2dParams& p) {
  using A = opmath_t<T>;
  const PoolGeometry g(x, out, p);
  const T* px = x.data_ptr<T>();
  T* po = out.data_ptr<T>();
  parallel_for(0, g.planes, g.grain(), [&](int64_t lo, int64_t hi) {
    for (int64_t pl = lo; pl < hi; ++pl) {
      const T* xp = px + pl * g.H * g.W;
      T* op = po + pl * g.OH * g.OW;
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        const int64_t hs = oh * p.stride[0] - p.padding[0];
        const int64_t h0 = std::max<int64_t>(hs, 0), h1 = std::min(hs + p.kernel[0], g.H);
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const int64_t ws = ow * p.stride[1] - p.padding[1];
          const int64_t w0 = std::max<int64_t>(ws, 0), w1 = std::min(ws + p.kernel[1], g.W);
          A s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += static_cast<A>(xp[h * g.W + w]);
          const int64_t div = avg_divisor(hs, ws, g);
          op[oh * g.OW + ow] = static_cast<T>(div > 0 ? s / static_cast<A>(div) : A(0));
        }
      }
    }
  });
}

template <class T> void avg_pool_backward(Tensor& grad_x, const Tensor& grad_out, const Pool2dParams& p) {
  using A = opmath_t<T>;
  const PoolGeometry g(grad_x, grad_out, p);
  const T* pg = grad_out.data_ptr<T>();
  T* px = grad_x.data_ptr<T>();
  parallel_for(0, g.planes, g.grain(), [&](int64_t lo, int64_t hi) {
    std::vector<A> acc(g.H * g.W);
    for (int64_t pl = lo; pl < hi; ++pl) {
      std::fill(acc.begin(), acc.end(), A(0));
      const T* gp = pg + pl * g.OH * g.OW;
      for (int64_t oh = 0; oh < g.OH; ++oh) {
        const int64_t hs = oh * p.stride[0] - p.padding[0];
        const int64_t h0 = std::max<int64_t>(hs, 0), h1 = std::min(hs + p.kernel[0], g.H);
        for (int64_t ow = 0; ow < g.OW; ++ow) {
          const int64_t ws = ow * p.stride[1] - p.padding[1];
          const int64_t w0 = std::max<int64_t>(ws, 0), w1 = std::min(ws + p.kernel[1], g.W);
          const int64_t div = avg_divisor(hs, ws, g);
          if (div <= 0) continue;
          const A v = static_cast<A>(gp[oh * g.OW + ow]) / static_cast<A>(div);
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) acc[h * g.W + w] += v;
        }
      }
      T* xp = px + pl * g.H * g.W;
      for (int64_t i = 0; i < g.H * g.W; ++i) xp[i] = static_cast<T>(acc[i]);
    }
  });
}

void max_pool2d_kernel(Tensor& out, Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  KILN_DISPATCH_FLOATING(x.dtype(), "max_pool2d", [&]<class T>() { max_pool_forward<T>(out, indices, x, p); });
}

void max_pool2d_backward_kernel(Tensor& grad_x, const Tensor& grad_out, const Tensor& indices) {
  KILN_DISPATCH_FLOATING(grad_x.dtype(), "max_pool2d_backward",
                         [&]<class T>() { max_pool_backward<T>(grad_x, grad_out, indices); });
}

void avg_pool2d_kernel(Tensor& out, const Tensor& x, const Pool2dParams& p) {
  KILN_DISPATCH_FLOATING(x.dtype(), "avg_pool2d", [&]<class T>() { avg_pool_forward<T>(out, x, p); });
}

void avg_pool2d_backward_kernel(Tensor& grad_x, const Tensor& grad_out, const Pool2dParams& p) {
  KILN_DISPATCH_FLOATING(grad_x.dtype(), "avg_pool2d_backward",
                         [&]<class T>() { avg_pool_backward<T>(grad_x, grad_out, p); });
}

}  // namespace

KILN_REGISTER_KERNEL(max_pool2d, DeviceType::CPU, &max_pool2d_kernel);
KILN_REGISTER_KERNEL(max_pool2d_backward, DeviceType::CPU, &max_pool2d_backward_kernel);
KILN_REGISTER_KERNEL(avg_pool2d, DeviceType::CPU, &avg_pool2d_kernel);
KILN_REGISTER_KERNEL(avg_pool2d_backward, DeviceType::CPU, &avg_pool2d_backward_kernel);

}  // namespace kiln::cpu
