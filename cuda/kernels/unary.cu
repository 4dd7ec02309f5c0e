// Elementwise unary ops on CUDA, the same formulas as core/cpu/elementwise_kernels.cc: 16-bit
// floats compute in float; integer dtypes get neg/abs/relu/square/sign/pow_scalar/clamp. The
// kind is a runtime switch inside the kernel (one kernel per dtype: these loops are memory
// bound, and it keeps compile time and binary size small).
#include <cmath>
#include <limits>

#include "core/int_pow.h"
#include "cuda/kernels/dtypes.cuh"
#include "cuda/kernels/loops.cuh"

namespace kiln::cuda::kern {
namespace {

template <class M> __device__ __forceinline__ M sigmoid_of(M x) { return M(1) / (M(1) + exp(-x)); }
template <class M> __device__ __forceinline__ M gelu_of(M x) {
  return M(0.5) * x * (M(1) + erf(x * M(0.70710678118654752440)));
}

template <class T> struct FloatUnaryF {
  using M = opmath_t<T>;
  UnaryKind kind;
  M a, b;
  __device__ T operator()(T xs) const {
    const M v = to_math(xs);
    M r;
    switch (kind) {
      case UnaryKind::neg: r = -v; break;
      case UnaryKind::abs: r = fabs(v); break;
      case UnaryKind::exp: r = exp(v); break;
      case UnaryKind::log: r = log(v); break;
      case UnaryKind::log1p: r = log1p(v); break;
      case UnaryKind::expm1: r = expm1(v); break;
      case UnaryKind::sqrt: r = sqrt(v); break;
      case UnaryKind::rsqrt: r = M(1) / sqrt(v); break;
      case UnaryKind::sin: r = sin(v); break;
      case UnaryKind::cos: r = cos(v); break;
      case UnaryKind::tanh: r = tanh(v); break;
      case UnaryKind::sigmoid: r = sigmoid_of(v); break;
      case UnaryKind::relu: r = v < M(0) ? M(0) : v; break;  // keeps NaN
      case UnaryKind::gelu: r = gelu_of(v); break;
      case UnaryKind::silu: r = v * sigmoid_of(v); break;
      case UnaryKind::square: r = v * v; break;
      case UnaryKind::reciprocal: r = M(1) / v; break;
      case UnaryKind::sign: r = static_cast<M>((M(0) < v) - (v < M(0))); break;
      case UnaryKind::pow_scalar:
        r = a == M(2) ? v * v : a == M(3) ? v * v * v : a == M(0.5) ? sqrt(v) : a == M(-1) ? M(1) / v : pow(v, a);
        break;
      case UnaryKind::clamp: r = v < a ? a : (v > b ? b : v); break;  // NaN passes through
      default: r = v; break;
    }
    return from_math<T>(r);
  }
};

template <class T> struct IntUnaryF {
  UnaryKind kind;
  T lo, hi, e;
  __device__ T operator()(T v) const {
    switch (kind) {
      case UnaryKind::neg: return static_cast<T>(-v);
      case UnaryKind::abs: return v < 0 ? static_cast<T>(-v) : v;
      case UnaryKind::relu: return v < 0 ? T(0) : v;
      case UnaryKind::square: return static_cast<T>(v * v);
      case UnaryKind::sign: return static_cast<T>((T(0) < v) - (v < T(0)));
      case UnaryKind::pow_scalar: return int_pow(v, e);
      case UnaryKind::clamp: return v < lo ? lo : (v > hi ? hi : v);
      default: return v;
    }
  }
};

template <class I> I int_bound(double v) {
  if (v <= static_cast<double>(std::numeric_limits<I>::lowest())) return std::numeric_limits<I>::lowest();
  if (v >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

}  // namespace

void launch_unary(const UnaryOp& op, ScalarType type, const ElementwiseArgs<2>& a, CUstream_st* stream) {
  dispatch_all(type, [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      return;  // refused on the host side
    } else if constexpr (std::is_integral_v<T>) {
      IntUnaryF<T> f{op.kind, int_bound<T>(op.a), int_bound<T>(op.b), static_cast<T>(op.a)};
      run_elementwise<T, T, 1>(a, f, stream);
    } else {
      using M = opmath_t<T>;
      run_elementwise<T, T, 1>(a, FloatUnaryF<T>{op.kind, static_cast<M>(op.a), static_cast<M>(op.b)}, stream);
    }
  });
}

}  // namespace kiln::cuda::kern
