// Elementwise binary ops on CUDA (with broadcasting through zero strides), the same formulas as
// core/cpu/elementwise_kernels.cc; the host side passes only the dtypes core allows (the kinds'
// rows in core/elementwise_ops.h). Bool: + and max are "or", * and min are "and".
#include <cmath>

#include "core/int_pow.h"
#include "cuda/kernels/dtypes.cuh"
#include "cuda/kernels/loops.cuh"

namespace kiln::cuda::kern {
namespace {

template <class T> struct FloatBinaryF {
  using M = opmath_t<T>;
  BinaryKind kind;
  __device__ T operator()(T xs, T ys) const {
    const M x = to_math(xs), y = to_math(ys);
    M r;
    switch (kind) {
      case BinaryKind::add: r = x + y; break;
      case BinaryKind::sub: r = x - y; break;
      case BinaryKind::mul: r = x * y; break;
      case BinaryKind::div: r = x / y; break;
      case BinaryKind::pow: r = pow(x, y); break;
      case BinaryKind::maximum: r = x != x ? x : (x > y ? x : y); break;
      case BinaryKind::minimum: r = x != x ? x : (x < y ? x : y); break;
      default: r = x; break;
    }
    return from_math<T>(r);
  }
};

template <class T> struct IntBinaryF {
  BinaryKind kind;
  __device__ T operator()(T x, T y) const {
    switch (kind) {
      case BinaryKind::add: return static_cast<T>(x + y);
      case BinaryKind::sub: return static_cast<T>(x - y);
      case BinaryKind::mul: return static_cast<T>(x * y);
      case BinaryKind::pow: return int_pow(x, y);
      case BinaryKind::maximum: return x > y ? x : y;
      case BinaryKind::minimum: return x < y ? x : y;
      default: return x;
    }
  }
};

struct BoolBinaryF {
  bool is_or;
  __device__ bool operator()(bool x, bool y) const { return is_or ? (x || y) : (x && y); }
};

}  // namespace

void launch_binary(BinaryKind kind, ScalarType type, const ElementwiseArgs<3>& a, CUstream_st* stream) {
  dispatch_all(type, [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      run_elementwise<bool, bool, 2>(a, BoolBinaryF{kind == BinaryKind::add || kind == BinaryKind::maximum}, stream);
    } else if constexpr (std::is_integral_v<T>) {
      run_elementwise<T, T, 2>(a, IntBinaryF<T>{kind}, stream);
    } else {
      run_elementwise<T, T, 2>(a, FloatBinaryF<T>{kind}, stream);
    }
  });
}

}  // namespace kiln::cuda::kern
