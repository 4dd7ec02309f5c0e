// Eight-float vectors for the hand-vectorised f32 loops of the CPU kernels (softmax, layer norm,
// cross-entropy, gelu): GCC/Clang vector extensions (one AVX register on x86-64-v3, FMA where the
// target has it), horizontal sums and maxima in a fixed lane order, and an exp accurate to ~2 ulp.
// Callers run every element through the same vector code, a row's or a range's tail included
// (load_tail pads it), so a result never depends on where a thread's range starts or on the
// buffer's alignment: the kernels built on it give the same bits at any thread count.
#pragma once

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstring>

namespace kiln::cpu::vec {

typedef float F8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));

/// Lanes per vector.
inline constexpr int64_t kW = 8;

/// a * b + c, rounded once where the target has FMA (always the same way in a given build).
inline F8 fmadd(F8 a, F8 b, F8 c) {
#if defined(__FMA__)
  return (F8)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);  // casts between vector types move bits
#else
  return a * b + c;
#endif
}

inline F8 max(F8 a, F8 b) { return a > b ? a : b; }

/// Sum of the lanes, always in the same order.
inline float hsum(F8 v) { return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7])); }

/// Largest lane (a NaN lane may or may not win; callers' later arithmetic propagates NaN).
inline float hmax(F8 v) {
  float m = v[0];
  for (int i = 1; i < kW; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

/// max(lo, v) and min(v, hi) per lane that keep a NaN v (one instruction each with AVX).
inline F8 at_least(F8 v, F8 lo) {
#if defined(__AVX__)
  return (F8)_mm256_max_ps((__m256)lo, (__m256)v);  // the second operand where either is NaN
#else
  return v < lo ? lo : v;
#endif
}
inline F8 at_most(F8 v, F8 hi) {
#if defined(__AVX__)
  return (F8)_mm256_min_ps((__m256)hi, (__m256)v);
#else
  return v > hi ? hi : v;
#endif
}

/// The vector type and the width-dependent operations of the 8-lane build, for code written once
/// for any width (exp_v below, core/cpu/gelu_tanh_vec.h); the AVX-512 unit instantiates the same
/// templates with its 16-lane traits (core/cpu/gelu_avx512.cc).
struct Lanes8 {
  using F = F8;
  using I = I8;
  static constexpr int64_t kW = vec::kW;
  static F fmadd(F a, F b, F c) { return vec::fmadd(a, b, c); }
  static F at_least(F v, F lo) { return vec::at_least(v, lo); }
  static F at_most(F v, F hi) { return vec::at_most(v, hi); }
};

template <class V> typename V::F splat_v(float v) { return typename V::F{} + v; }

template <class V> typename V::F load_v(const float* p) {
  typename V::F v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class V> void store_v(float* p, typename V::F v) { std::memcpy(p, &v, sizeof v); }

/// p[0, n) (n < V::kW) in the low lanes, `fill` in the others.
template <class V> typename V::F load_tail_v(const float* p, int64_t n, float fill) {
  float b[V::kW];
  for (int64_t i = 0; i < V::kW; ++i) b[i] = i < n ? p[i] : fill;
  return load_v<V>(b);
}

/// Stores the low n (< V::kW) lanes of v at p.
template <class V> void store_tail_v(float* p, typename V::F v, int64_t n) {
  float b[V::kW];
  store_v<V>(b, v);
  for (int64_t i = 0; i < n; ++i) p[i] = b[i];
}

/// e^x per lane: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts), Cephes' expf
/// polynomial for e^r, 2^n put into the exponent bits; about 18 vector operations, no branch or
/// select. x is raised to -88 first, where n = -127 makes 2^n's bits 0: the result is 0 below
/// about -87.6 (PyTorch gives denormals there, all under 1.2e-38), exactly 0 for -inf. n is
/// capped at 127: above 88.38 the polynomial, evaluated past its range, overflows to +inf where
/// e^x does (88.72), and +inf gives +inf. NaN gives NaN. Each lane's arithmetic is the same at
/// any width, so the 8- and 16-lane builds give the same bits.
template <class V> typename V::F exp_v(typename V::F x) {
  using F = typename V::F;
  auto c = [](float v) { return splat_v<V>(v); };
  const F xc = V::at_least(x, c(-88.0f));
  // Round x / ln2 to the nearest integer: adding 1.5 * 2^23 leaves no fraction bits.
  const F magic = c(12582912.0f);
  const F n = V::at_most(V::fmadd(xc, c(1.44269504088896341f), magic) - magic, c(127.0f));
  F r = V::fmadd(n, c(-0.693359375f), xc);
  r = V::fmadd(n, c(2.12194440e-4f), r);
  F p = c(1.9875691500e-4f);
  p = V::fmadd(p, r, c(1.3981999507e-3f));
  p = V::fmadd(p, r, c(8.3334519073e-3f));
  p = V::fmadd(p, r, c(4.1665795894e-2f));
  p = V::fmadd(p, r, c(1.6666665459e-1f));
  p = V::fmadd(p, r, c(5.0000001201e-1f));
  p = V::fmadd(p, r * r, r + c(1.0f));
  const typename V::I bits = (__builtin_convertvector(n, typename V::I) + 127) << 23;
  return p * (F)bits;  // the bits of 2^n
}

// The 8-lane names the kernels use.
inline F8 splat(float v) { return splat_v<Lanes8>(v); }
inline F8 load(const float* p) { return load_v<Lanes8>(p); }
inline void store(float* p, F8 v) { store_v<Lanes8>(p, v); }
inline F8 exp(F8 x) { return exp_v<Lanes8>(x); }
inline F8 load_tail(const float* p, int64_t n, float fill) { return load_tail_v<Lanes8>(p, n, fill); }
inline void store_tail(float* p, F8 v, int64_t n) { store_tail_v<Lanes8>(p, v, n); }

}  // namespace kiln::cpu::vec
