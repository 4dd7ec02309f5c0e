// f32 gelu(approximate='tanh') and its gradient over contiguous spans, on core/cpu/vec8.h:
//   0.5 x (1 + tanh(u)) = x s,  s = 1 / (1 + e),  e = exp(z),  z = -2u = x (a + b x^2),
// with u = sqrt(2/pi) (x + k x^3), a = -2 sqrt(2/pi), b = k a: one exp and one divide per
// element, and no cancellation in 1 + tanh(u) where x < 0. Every element, a span's tail
// included, takes the same vector code (thread-count independent).
#pragma once

#include <cstdint>

#include "core/cpu/vec8.h"
#include "core/elementwise_ops.h"

namespace kiln::cpu {
namespace gelu_detail {

struct Consts {
  vec::F8 a = vec::splat(static_cast<float>(-2 * unary_fn::kSqrt2OverPi));
  vec::F8 b = vec::splat(static_cast<float>(-2 * unary_fn::kSqrt2OverPi * unary_fn::kGeluKappa));
  vec::F8 one = vec::splat(1.0f);
};

/// z = -2u for x (x2 = x * x).
inline vec::F8 minus_2u(const Consts& c, vec::F8 x, vec::F8 x2) { return x * vec::fmadd(c.b, x2, c.a); }

}  // namespace gelu_detail

/// out[0, m) = gelu_tanh(in[0, m)); out may equal in.
inline void gelu_tanh_f32(float* out, const float* in, int64_t m) {
  using namespace vec;
  const gelu_detail::Consts c;
  // x / (1 + e): e = +inf (x below about -9) gives -0.
  auto f = [&](F8 x) { return x / (c.one + vec::exp(gelu_detail::minus_2u(c, x, x * x))); };
  const int64_t body = m - m % kW;
  for (int64_t i = 0; i < body; i += kW) store(out + i, f(load(in + i)));
  if (body < m) store_tail(out + body, f(load_tail(in + body, m - body, 0.0f)), m - body);
}

/// out[0, m) = g * gelu_tanh'(x) = g (s - x s (1 - s) z'(x)), z' = a + 3 b x^2, s (1 - s) = (e s) s
/// (no cancellation where s is near 1); out may equal g or x. z is capped at 80 here, so that e
/// stays finite and s a normal float (1.8e-35 and below where x < -9 or so): (e s) s then gives
/// the vanishing gradient of large negative x instead of inf * 0.
inline void gelu_tanh_backward_f32(float* out, const float* g, const float* xs, int64_t m) {
  using namespace vec;
  const gelu_detail::Consts c;
  const F8 minus_a = -c.a, minus_3b = c.b * splat(-3.0f), cap = splat(80.0f);
  auto f = [&](F8 gv, F8 x) {
    const F8 x2 = x * x;
    const F8 e = vec::exp(at_most(gelu_detail::minus_2u(c, x, x2), cap));
    const F8 s = c.one / (c.one + e);
    return gv * fmadd(x * ((e * s) * s), fmadd(minus_3b, x2, minus_a), s);
  };
  const int64_t body = m - m % kW;
  for (int64_t i = 0; i < body; i += kW) store(out + i, f(load(g + i), load(xs + i)));
  if (body < m) {
    const int64_t n = m - body;
    store_tail(out + body, f(load_tail(g + body, n, 0.0f), load_tail(xs + body, n, 0.0f)), n);
  }
}

}  // namespace kiln::cpu
