// Element types, their sizes and names, PyTorch's promotion lattice, and the macros that turn a
// runtime DType into a C++ type inside kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "core/half.h"

namespace kiln {

enum class DType : int8_t { b8, i32, i64, f16, bf16, f32, f64 };
inline constexpr int kNumDTypes = 7;

inline constexpr DType kBool = DType::b8, kInt32 = DType::i32, kInt64 = DType::i64,
                       kFloat16 = DType::f16, kBFloat16 = DType::bf16, kFloat32 = DType::f32,
                       kFloat64 = DType::f64;

size_t element_size(DType t);
std::string_view dtype_name(DType t);  // "f32", "bf16", "bool", ...
inline bool is_floating(DType t) { return t >= DType::f16; }
inline bool is_integral(DType t, bool include_bool) {
  return t == DType::i32 || t == DType::i64 || (include_bool && t == DType::b8);
}

/// The type two operands of one priority promote to (f16 + bf16 -> f32, int + float -> float).
DType promote_types(DType a, DType b);

/// The default floating dtype (f32), used for float scalars and creation ops.
inline constexpr DType kDefaultFloat = DType::f32;

template <class T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::b8; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<Half> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<BFloat16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };

/// The type arithmetic on T is carried out in (float for the 16-bit floats).
template <class T> struct opmath { using type = T; };
template <> struct opmath<Half> { using type = float; };
template <> struct opmath<BFloat16> { using type = float; };
template <class T> using opmath_t = typename opmath<T>::type;

}  // namespace kiln

/// A dtype's name in messages, with string format specs ("{:>8}"). The body is in dtype.cc: the
/// base's format() is defined in fmt/format.h, which Kiln's headers leave out (core/error.h).
template <> struct fmt::formatter<kiln::DType> : fmt::formatter<std::string_view> {
  format_context::iterator format(kiln::DType t, format_context& ctx) const;
};

namespace kiln {

// dispatch_*(dtype, "op", [&]<class scalar_t>() { ... }) calls the generic lambda with the C++
// type of `dtype`; a dtype outside the listed set throws naming the op.
template <class F> decltype(auto) dispatch_floating(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::f32: return f.template operator()<float>();
    case DType::f64: return f.template operator()<double>();
    case DType::f16: return f.template operator()<Half>();
    case DType::bf16: return f.template operator()<BFloat16>();
    default: fail("{}: dtype {} is not supported (floating types only)", op, t);
  }
}

template <class F> decltype(auto) dispatch_numeric(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::i32: return f.template operator()<int32_t>();
    case DType::i64: return f.template operator()<int64_t>();
    case DType::b8: fail("{}: dtype bool is not supported (numeric types only)", op);
    default: return dispatch_floating(t, op, std::forward<F>(f));
  }
}

template <class F> decltype(auto) dispatch_all(DType t, const char* op, F&& f) {
  if (t == DType::b8) return f.template operator()<bool>();
  return dispatch_numeric(t, op, std::forward<F>(f));
}

}  // namespace kiln

#define KILN_DISPATCH_FLOATING(DTYPE, OPNAME, ...) ::kiln::dispatch_floating(DTYPE, OPNAME, __VA_ARGS__)
#define KILN_DISPATCH_NUMERIC(DTYPE, OPNAME, ...) ::kiln::dispatch_numeric(DTYPE, OPNAME, __VA_ARGS__)
#define KILN_DISPATCH_ALL(DTYPE, OPNAME, ...) ::kiln::dispatch_all(DTYPE, OPNAME, __VA_ARGS__)
