// Device-side element types: ScalarType -> C++ type (__half, __nv_bfloat16, ...), the type math
// is done in (float for the 16-bit floats, as on the CPU), and conversions that match the CPU
// copy kernel (through the destination's math type; bool is "!= 0").
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "cuda/kernels/launch.h"

namespace kiln::cuda::kern {

template <class T> struct opmath { using type = T; };
template <> struct opmath<__half> { using type = float; };
template <> struct opmath<__nv_bfloat16> { using type = float; };
template <class T> using opmath_t = typename opmath<T>::type;

template <class T> __device__ __forceinline__ opmath_t<T> to_math(T x) {
  if constexpr (std::is_same_v<T, __half>) return __half2float(x);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(x);
  else return x;
}

template <class T, class M> __device__ __forceinline__ T from_math(M x) {
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(static_cast<float>(x));
  else if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(static_cast<float>(x));
  else return static_cast<T>(x);
}

template <class To, class From> __device__ __forceinline__ To convert(From x) {
  if constexpr (std::is_same_v<To, bool>) return to_math(x) != opmath_t<From>(0);
  else return from_math<To>(static_cast<opmath_t<To>>(to_math(x)));
}

/// Calls f.template operator()<T>() with T the device type of `t`.
template <class F> void dispatch_all(ScalarType t, F&& f) {
  switch (t) {
    case ScalarType::b8: return f.template operator()<bool>();
    case ScalarType::i32: return f.template operator()<int32_t>();
    case ScalarType::i64: return f.template operator()<int64_t>();
    case ScalarType::f16: return f.template operator()<__half>();
    case ScalarType::bf16: return f.template operator()<__nv_bfloat16>();
    case ScalarType::f32: return f.template operator()<float>();
    case ScalarType::f64: return f.template operator()<double>();
  }
}

/// The same for the floating types; other dtypes do nothing (the host side refuses them).
template <class F> void dispatch_floating(ScalarType t, F&& f) {
  switch (t) {
    case ScalarType::f16: return f.template operator()<__half>();
    case ScalarType::bf16: return f.template operator()<__nv_bfloat16>();
    case ScalarType::f32: return f.template operator()<float>();
    case ScalarType::f64: return f.template operator()<double>();
    default: return;  // refused on the host side
  }
}

}  // namespace kiln::cuda::kern
