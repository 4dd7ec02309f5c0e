// f32 gelu(approximate='tanh') and its gradient over contiguous spans, on core/cpu/vec8.h:
//   0.5 x (1 + tanh(u)) = x s,  s = 1 / (1 + e),  e = exp(z),  z = -2u = x (a + b x^2),
// with u = sqrt(2/pi) (x + k x^3), a = -2 sqrt(2/pi), b = k a: one exp and one divide per
// element, and no cancellation in 1 + tanh(u) where x < 0. Every element, a span's tail
// included, takes the same vector code (thread-count independent). Written once for any vector
// width: 8 lanes in the baseline (AVX2) build, 16 in the AVX-512 unit, the same bits per lane.
#pragma once

#include <cstdint>

#include "core/cpu/vec8.h"
#include "core/elementwise_ops.h"

namespace kiln::cpu {
namespace gelu_detail {

template <class V> struct Consts {
  using F = typename V::F;
  F a = vec::splat_v<V>(static_cast<float>(-2 * unary_fn::kSqrt2OverPi));
  F b = vec::splat_v<V>(static_cast<float>(-2 * unary_fn::kSqrt2OverPi * unary_fn::kGeluKappa));
  F one = vec::splat_v<V>(1.0f);

  /// z = -2u for x (x2 = x * x).
  F minus_2u(F x, F x2) const { return x * V::fmadd(b, x2, a); }
};

/// out[0, m) = f(in0[i], in1[i]...) over whole vectors, the tail padded with zeros: every element
/// takes the same vector code.
template <class V, class Fn, class... In> void map_spans(float* out, int64_t m, Fn f, const In*... in) {
  constexpr int64_t kW = V::kW;
  const int64_t body = m - m % kW;
  for (int64_t i = 0; i < body; i += kW) vec::store_v<V>(out + i, f(vec::load_v<V>(in + i)...));
  if (body < m) {
    const int64_t n = m - body;
    vec::store_tail_v<V>(out + body, f(vec::load_tail_v<V>(in + body, n, 0.0f)...), n);
  }
}

}  // namespace gelu_detail

/// out[0, m) = gelu_tanh(in[0, m)); out may equal in. V: vec::Lanes8 or the AVX-512 unit's lanes.
template <class V> void gelu_tanh_v(float* out, const float* in, int64_t m) {
  using F = typename V::F;
  const gelu_detail::Consts<V> c;
  // x / (1 + e): e = +inf (x below about -9) gives -0.
  gelu_detail::map_spans<V>(out, m, [&](F x) { return x / (c.one + vec::exp_v<V>(c.minus_2u(x, x * x))); }, in);
}

/// out[0, m) = g * gelu_tanh'(x) = g (s - x s (1 - s) z'(x)), z' = a + 3 b x^2, s (1 - s) = (e s) s
/// (no cancellation where s is near 1); out may equal g or x. z is capped at 80 here, so that e
/// stays finite and s a normal float (1.8e-35 and below where x < -9 or so): (e s) s then gives
/// the vanishing gradient of large negative x instead of inf * 0.
template <class V> void gelu_tanh_backward_v(float* out, const float* g, const float* xs, int64_t m) {
  using F = typename V::F;
  const gelu_detail::Consts<V> c;
  const F minus_a = -c.a, minus_3b = c.b * vec::splat_v<V>(-3.0f), cap = vec::splat_v<V>(80.0f);
  auto f = [&](F gv, F x) {
    const F x2 = x * x;
    const F e = vec::exp_v<V>(V::at_most(c.minus_2u(x, x2), cap));
    const F s = c.one / (c.one + e);
    return gv * V::fmadd(x * ((e * s) * s), V::fmadd(minus_3b, x2, minus_a), s);
  };
  gelu_detail::map_spans<V>(out, m, f, g, xs);
}

inline void gelu_tanh_f32(float* out, const float* in, int64_t m) { gelu_tanh_v<vec::Lanes8>(out, in, m); }
inline void gelu_tanh_backward_f32(float* out, const float* g, const float* xs, int64_t m) {
  gelu_tanh_backward_v<vec::Lanes8>(out, g, xs, m);
}

/// The 16-lane instantiations, in the AVX-512 unit (core/cpu/gelu_avx512.cc): call only where
/// use_avx512() (core/cpu/isa.h). They give the same bits as the 8-lane ones.
void gelu_tanh_f32_avx512(float* out, const float* in, int64_t m);
void gelu_tanh_backward_f32_avx512(float* out, const float* g, const float* xs, int64_t m);

}  // namespace kiln::cpu
