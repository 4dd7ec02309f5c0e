// Elementwise unary ops on CUDA, forward and backward: the registry's scalar formulas
// (core/elementwise_ops.h, the same the CPU loops run). 16-bit floats compute in float; integer
// dtypes get the `numeric` kinds (the host side passes only what core allows). The kind is a
// runtime switch inside the kernel (one kernel per dtype: these loops are memory bound, and it
// keeps compile time and binary size small).
#include <type_traits>

#include "core/elementwise_ops.h"
#include "cuda/kernels/dtypes.cuh"
#include "cuda/kernels/loops.cuh"

namespace kiln::cuda::kern {
namespace {

template <class T> struct UnaryF {
  using M = opmath_t<T>;
  UnaryKind kind;
  M a, b;
  __device__ T operator()(T x) const { return from_math<T>(unary_scalar<M>(kind, to_math(x), a, b)); }
};

template <class T> struct UnaryBackwardF {
  using M = opmath_t<T>;
  UnaryKind kind;
  M a, b;
  __device__ T operator()(T g, T s) const {
    return from_math<T>(unary_grad_scalar<M>(kind, to_math(g), to_math(s), a, b));
  }
};

}  // namespace

void launch_unary(const UnaryOp& op, ScalarType type, const ElementwiseArgs<2>& a, CUstream_st* stream) {
  dispatch_all(type, [&]<class T>() {
    if constexpr (std::is_same_v<T, bool>) {
      return;  // refused by core
    } else if constexpr (std::is_integral_v<T>) {
      run_elementwise<T, T, 1>(a, UnaryF<T>{op.kind, int_bound<T>(op.a), int_bound<T>(op.b)}, stream);
    } else {
      using M = opmath_t<T>;
      run_elementwise<T, T, 1>(a, UnaryF<T>{op.kind, static_cast<M>(op.a), static_cast<M>(op.b)}, stream);
    }
  });
}

void launch_unary_backward(const UnaryOp& op, ScalarType type, const ElementwiseArgs<3>& a, CUstream_st* stream) {
  dispatch_floating(type, [&]<class T>() {
    using M = opmath_t<T>;
    run_elementwise<T, T, 2>(a, UnaryBackwardF<T>{op.kind, static_cast<M>(op.a), static_cast<M>(op.b)}, stream);
  });
}

}  // namespace kiln::cuda::kern
