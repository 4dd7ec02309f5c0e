// The elementwise op registry: one row per unary (and binary) kind, from which the kind enums,
// their names, the dtype rules, what autograd saves and the derivative are generated, and the
// scalar formulas the CPU loops and the CUDA kernels both evaluate (nvcc compiles this header for
// the device too, as core/int_pow.h). Adding a unary op: one KILN_UNARY_OPS row, one formula in
// unary_fn below, a public entry point (docs/adding_an_op.md).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/int_pow.h"

// ---- the unary table
// _(name, dtypes, saves, amp, grad)
//   dtypes: numeric  -- integer tensors keep their dtype (bool refused);
//           floating -- integer tensors are computed in the default float (torch.exp(int) is f32).
//   saves:  what backward reads as `s`: input (x), output (y), or none.
//   amp:    under autocast, fp32 -- f16/bf16 inputs are cast up to f32 first (ops whose range or
//           rounding the 16-bit formats cannot hold, PyTorch's autocast-to-f32 list);
//           keep -- the op runs in its input's dtype. core/autocast_policy.h lists the other ops.
//   grad:   grad_x as an expression of g (grad_y), s, the op's parameters a and b, in math type M.
// Parameters a, b are UnaryOp::a, UnaryOp::b (named per row below). PyTorch's rule is followed at
// kinks and bounds (noted where it matters).
#define KILN_UNARY_OPS(_)                                                                           \
  _(neg, numeric, none, keep, -g)                                                                   \
  _(abs, numeric, input, keep, g * sign(s, a, b))                                                   \
  _(exp, floating, output, fp32, g * s)                                                             \
  _(log, floating, input, fp32, g / s)                                                              \
  _(sqrt, floating, output, keep, g / (s * M(2)))                                                   \
  _(rsqrt, floating, output, fp32, g * s * s * s * M(-0.5))                                         \
  _(sin, floating, input, keep, g * cos(s))                                                         \
  _(cos, floating, input, keep, -g * sin(s))                                                        \
  _(tanh, floating, output, keep, g * (M(1) - s * s))                                               \
  _(sigmoid, floating, output, keep, g * s * (M(1) - s))                                            \
  /* 0 where x <= 0 even for an inf/NaN g, g at x = NaN (PyTorch's threshold_backward) */          \
  _(relu, numeric, input, keep, s <= M(0) ? M(0) : g)                                               \
  _(gelu, floating, input, keep, g * gelu_grad(s))                                                  \
  _(silu, floating, input, keep, g * silu_grad(s))                                                  \
  _(square, numeric, input, keep, g * s * M(2))                                                     \
  _(sign, numeric, none, keep, M(0))                                                                \
  _(log1p, floating, input, fp32, g / (s + M(1)))                                                   \
  _(expm1, floating, output, fp32, g * (s + M(1)))                                                  \
  _(reciprocal, floating, output, fp32, -g * s * s)                                                 \
  /* x ^ a */                                                                                       \
  _(pow_scalar, numeric, input, fp32, a == M(0) ? M(0) : g * pow(s, a - M(1)) * a)                  \
  /* min(max(x, a), b) (a = -inf / b = +inf when absent). Gradient: g where a < x < b; 0 at x == a \
     and x == b, outside, and for NaN x, as PyTorch 2.15 measured (tests/testing/torch_compare.py) */ \
  _(clamp, numeric, input, keep, s > a && s < b ? g : M(0))                                         \
  /* a = beta, b = threshold: x where beta x > threshold, else log1p(exp(beta x)) / beta */         \
  _(softplus, floating, input, fp32, s * a > b ? g : g * softplus_grad(s * a))                      \
  /* a = negative_slope; slope a at x == 0 (PyTorch: x > 0 ? g : g * slope) */                      \
  _(leaky_relu, floating, input, keep, s > M(0) ? g : g * a)                                        \
  /* a = alpha; a at x == 0, g at x = NaN (PyTorch: x <= 0 ? g * alpha * exp(x) : g) */             \
  _(elu, floating, input, keep, s <= M(0) ? g * a * exp(s) : g)                                     \
  /* a = min_val, b = max_val; as clamp, 0 at both bounds (PyTorch's hardtanh_backward) */         \
  _(hardtanh, floating, input, keep, s <= a || s >= b ? M(0) : g)                                   \
  /* 0 at x == -3 and g at x == 3 (PyTorch 2.15, measured) */                                      \
  _(hardswish, floating, input, keep, s <= M(-3) ? M(0) : (s < M(3) ? g * (s / M(3) + M(0.5)) : g)) \
  /* F.gelu(approximate='tanh') */                                                                  \
  _(gelu_tanh, floating, input, keep, g * gelu_tanh_grad(s))

// ---- the binary table: _(name, dtypes, amp) with dtypes as above plus `any` (bool too: + and max
// are "or", * and min are "and", as PyTorch), amp as above. div is true division (integers divide
// in the default float).
#define KILN_BINARY_OPS(_)                                                                         \
  _(add, any, keep) _(sub, numeric, keep) _(mul, any, keep) _(div, floating, keep) _(pow, numeric, fp32) \
  _(maximum, any, keep) _(minimum, any, keep)

namespace kiln {

enum class UnaryKind : int8_t {
#define KILN_UNARY_ENUM_(NAME, ...) NAME,
  KILN_UNARY_OPS(KILN_UNARY_ENUM_)
#undef KILN_UNARY_ENUM_
};

enum class BinaryKind : int8_t {
#define KILN_BINARY_ENUM_(NAME, ...) NAME,
  KILN_BINARY_OPS(KILN_BINARY_ENUM_)
#undef KILN_BINARY_ENUM_
};

#define KILN_COUNT_ROW_(...) +1
inline constexpr int kNumUnaryKinds = 0 KILN_UNARY_OPS(KILN_COUNT_ROW_);
inline constexpr int kNumBinaryKinds = 0 KILN_BINARY_OPS(KILN_COUNT_ROW_);
#undef KILN_COUNT_ROW_

/// Which dtypes a kind computes in (the `dtypes` column).
enum class KindDTypes : int8_t { any, numeric, floating };
/// What a unary kind's backward reads (the `saves` column).
enum class UnarySaves : int8_t { input, output, none };
/// What autocast does to a kind's inputs (the `amp` column).
enum class KindAutocast : int8_t { keep, fp32 };

KILN_HOST_DEVICE constexpr KindDTypes kind_dtypes(UnaryKind k) {
  constexpr KindDTypes t[] = {
#define KILN_UNARY_DT_(NAME, DT, ...) KindDTypes::DT,
      KILN_UNARY_OPS(KILN_UNARY_DT_)
#undef KILN_UNARY_DT_
  };
  return t[static_cast<int>(k)];
}

KILN_HOST_DEVICE constexpr KindDTypes kind_dtypes(BinaryKind k) {
  constexpr KindDTypes t[] = {
#define KILN_BINARY_DT_(NAME, DT, ...) KindDTypes::DT,
      KILN_BINARY_OPS(KILN_BINARY_DT_)
#undef KILN_BINARY_DT_
  };
  return t[static_cast<int>(k)];
}

constexpr KindAutocast kind_autocast(UnaryKind k) {
  constexpr KindAutocast t[] = {
#define KILN_UNARY_AMP_(NAME, DT, SAVES, AMP, ...) KindAutocast::AMP,
      KILN_UNARY_OPS(KILN_UNARY_AMP_)
#undef KILN_UNARY_AMP_
  };
  return t[static_cast<int>(k)];
}

constexpr KindAutocast kind_autocast(BinaryKind k) {
  constexpr KindAutocast t[] = {
#define KILN_BINARY_AMP_(NAME, DT, AMP) KindAutocast::AMP,
      KILN_BINARY_OPS(KILN_BINARY_AMP_)
#undef KILN_BINARY_AMP_
  };
  return t[static_cast<int>(k)];
}

constexpr UnarySaves unary_saves(UnaryKind k) {
  constexpr UnarySaves t[] = {
#define KILN_UNARY_SAVES_(NAME, DT, SAVES, ...) UnarySaves::SAVES,
      KILN_UNARY_OPS(KILN_UNARY_SAVES_)
#undef KILN_UNARY_SAVES_
  };
  return t[static_cast<int>(k)];
}

// ---- scalar formulas: M is float or double (16-bit floats compute in float), or an integer type
// for the `numeric` kinds (their parameters then come converted by int_bound).
namespace unary_fn {

#if defined(__CUDACC__)
using ::cos; using ::erf; using ::exp; using ::expm1; using ::fabs; using ::log; using ::log1p; using ::pow;
using ::sin; using ::sqrt; using ::tanh;
#else
using std::cos; using std::erf; using std::exp; using std::expm1; using std::fabs; using std::log; using std::log1p;
using std::pow; using std::sin; using std::sqrt; using std::tanh;
#endif

inline constexpr double kInvSqrt2 = 0.70710678118654752440;     // 1 / sqrt(2)
inline constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
inline constexpr double kGeluKappa = 0.044715;

template <class M> KILN_HOST_DEVICE inline M neg(M x, M, M) { return static_cast<M>(-x); }
template <class M> KILN_HOST_DEVICE inline M abs(M x, M, M) {
  if constexpr (std::is_integral_v<M>) return x < 0 ? static_cast<M>(-x) : x;
  else return fabs(x);
}
template <class M> KILN_HOST_DEVICE inline M exp(M x, M, M) { return exp(x); }
template <class M> KILN_HOST_DEVICE inline M log(M x, M, M) { return log(x); }
template <class M> KILN_HOST_DEVICE inline M sqrt(M x, M, M) { return sqrt(x); }
template <class M> KILN_HOST_DEVICE inline M rsqrt(M x, M, M) { return M(1) / sqrt(x); }
template <class M> KILN_HOST_DEVICE inline M sin(M x, M, M) { return sin(x); }
template <class M> KILN_HOST_DEVICE inline M cos(M x, M, M) { return cos(x); }
template <class M> KILN_HOST_DEVICE inline M tanh(M x, M, M) { return tanh(x); }
template <class M> KILN_HOST_DEVICE inline M sigmoid(M x, M = 0, M = 0) { return M(1) / (M(1) + exp(-x)); }
template <class M> KILN_HOST_DEVICE inline M relu(M x, M, M) { return x < M(0) ? M(0) : x; }  // keeps NaN
template <class M> KILN_HOST_DEVICE inline M gelu(M x, M, M) {
  return M(0.5) * x * (M(1) + erf(x * M(kInvSqrt2)));
}
template <class M> KILN_HOST_DEVICE inline M silu(M x, M, M) { return x * sigmoid(x); }
template <class M> KILN_HOST_DEVICE inline M square(M x, M, M) { return static_cast<M>(x * x); }
template <class M> KILN_HOST_DEVICE inline M sign(M x, M, M) { return static_cast<M>((M(0) < x) - (x < M(0))); }
template <class M> KILN_HOST_DEVICE inline M log1p(M x, M, M) { return log1p(x); }
template <class M> KILN_HOST_DEVICE inline M expm1(M x, M, M) { return expm1(x); }
template <class M> KILN_HOST_DEVICE inline M reciprocal(M x, M, M) { return M(1) / x; }
template <class M> KILN_HOST_DEVICE inline M pow_scalar(M x, M a, M) {
  if constexpr (std::is_integral_v<M>) return int_pow(x, a);
  else return a == M(2) ? x * x : a == M(3) ? x * x * x : a == M(0.5) ? sqrt(x) : a == M(-1) ? M(1) / x : pow(x, a);
}
template <class M> KILN_HOST_DEVICE inline M clamp(M x, M a, M b) { return x < a ? a : (x > b ? b : x); }  // NaN passes
template <class M> KILN_HOST_DEVICE inline M softplus(M x, M beta, M threshold) {
  return x * beta > threshold ? x : log1p(exp(x * beta)) / beta;
}
template <class M> KILN_HOST_DEVICE inline M leaky_relu(M x, M slope, M) { return x > M(0) ? x : x * slope; }
template <class M> KILN_HOST_DEVICE inline M elu(M x, M alpha, M) { return x > M(0) ? x : alpha * expm1(x); }
template <class M> KILN_HOST_DEVICE inline M hardtanh(M x, M lo, M hi) { return clamp(x, lo, hi); }
template <class M> KILN_HOST_DEVICE inline M hardswish(M x, M, M) { return x * clamp(x + M(3), M(0), M(6)) / M(6); }
template <class M> KILN_HOST_DEVICE inline M gelu_tanh(M x, M, M) {
  return M(0.5) * x * (M(1) + tanh(M(kSqrt2OverPi) * (x + M(kGeluKappa) * x * x * x)));
}

// ---- derivative helpers the grad column uses
/// d/dx [x Phi(x)] = Phi(x) + x phi(x).
template <class M> KILN_HOST_DEVICE inline M gelu_grad(M x) {
  const M cdf = M(0.5) * (M(1) + erf(x * M(kInvSqrt2)));
  const M pdf = exp(M(-0.5) * x * x) * M(kInvSqrt2Pi);
  return cdf + x * pdf;
}
template <class M> KILN_HOST_DEVICE inline M silu_grad(M x) {
  const M s = sigmoid(x);
  return s * (M(1) + x * (M(1) - s));
}
/// z / (z + 1) with z = exp(beta x), as PyTorch's softplus_backward.
template <class M> KILN_HOST_DEVICE inline M softplus_grad(M bx) {
  const M z = exp(bx);
  return z / (z + M(1));
}
template <class M> KILN_HOST_DEVICE inline M gelu_tanh_grad(M x) {
  const M inner = M(kSqrt2OverPi) * (x + M(kGeluKappa) * x * x * x);
  const M t = tanh(inner);
  return M(0.5) * (M(1) + t) + M(0.5) * x * (M(1) - t * t) * M(kSqrt2OverPi) * (M(1) + M(3 * kGeluKappa) * x * x);
}

/// Each row's grad column as a function of its own, <kind>_grad_of(g, s, a, b): grad_x from
/// g = grad_y and s = the saved input or output (the row's `saves`); floating M. Inside unary_fn
/// so the grad column's exp/cos/pow name the scalar functions. A loop over one kind calls its
/// function directly, so the formula inlines into the loop (through grad()'s switch g++ made an
/// out-of-line call per element: relu's backward was 7-9 % of a CPU CNN step).
#define KILN_UNARY_GRAD_FN_(NAME, DT, SAVES, AMP, GRAD)                                             \
  template <class M>                                                                             \
  KILN_HOST_DEVICE inline M NAME##_grad_of([[maybe_unused]] M g, [[maybe_unused]] M s,           \
                                           [[maybe_unused]] M a, [[maybe_unused]] M b) {         \
    return GRAD;                                                                                 \
  }
KILN_UNARY_OPS(KILN_UNARY_GRAD_FN_)
#undef KILN_UNARY_GRAD_FN_

/// The same, for a kind known only at run time.
template <class M> KILN_HOST_DEVICE inline M grad(UnaryKind kind, M g, M s, M a, M b) {
  switch (kind) {
#define KILN_UNARY_GRAD_(NAME, ...) \
  case UnaryKind::NAME: return NAME##_grad_of(g, s, a, b);
    KILN_UNARY_OPS(KILN_UNARY_GRAD_)
#undef KILN_UNARY_GRAD_
  }
  return g;
}

}  // namespace unary_fn

/// y = kind(x) with parameters a, b; integer M only for the `numeric` kinds (others return x).
template <class M> KILN_HOST_DEVICE inline M unary_scalar(UnaryKind kind, M x, M a, M b) {
  switch (kind) {
#define KILN_UNARY_CASE_(NAME, DT, ...)                                                        \
  case UnaryKind::NAME:                                                                        \
    if constexpr (std::is_integral_v<M> && KindDTypes::DT != KindDTypes::numeric) return x;    \
    else return unary_fn::NAME(x, a, b);
    KILN_UNARY_OPS(KILN_UNARY_CASE_)
#undef KILN_UNARY_CASE_
  }
  return x;
}

/// grad_x from g = grad_y and s = the saved input or output (the row's `saves`); floating M.
template <class M> KILN_HOST_DEVICE inline M unary_grad_scalar(UnaryKind kind, M g, M s, M a, M b) {
  return unary_fn::grad(kind, g, s, a, b);
}

/// A double parameter clamped into integer type I's range (the ±inf of an absent clamp bound
/// included): how the `numeric` kinds receive a and b for integer tensors.
template <class I> inline I int_bound(double v) {
  if (v <= static_cast<double>(std::numeric_limits<I>::lowest())) return std::numeric_limits<I>::lowest();
  if (v >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

}  // namespace kiln
