// A number passed to an op (fill value, alpha, exponent): remembers whether it was written as a
// bool, an integer or a floating value, since type promotion treats them differently.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"

namespace kiln {

class Scalar {
 public:
  enum class Kind : int8_t { Bool, Int, Float };

  Scalar() : Scalar(int64_t{0}) {}
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Scalar(T v) {  // NOLINT: numbers convert implicitly, as in PyTorch
    if constexpr (std::is_same_v<T, bool>) { kind_ = Kind::Bool; i_ = v; d_ = v; }
    else if constexpr (std::is_integral_v<T>) { kind_ = Kind::Int; i_ = static_cast<int64_t>(v); d_ = static_cast<double>(v); }
    else { kind_ = Kind::Float; d_ = static_cast<double>(v); i_ = saturate(d_); }
  }
  Scalar(Half v) : Scalar(static_cast<float>(v)) {}      // NOLINT
  Scalar(BFloat16 v) : Scalar(static_cast<float>(v)) {}  // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Float; }
  double to_double() const { return d_; }
  int64_t to_int() const { return i_; }
  template <class T> T to() const {
    if constexpr (std::is_same_v<T, bool>) return kind_ == Kind::Float ? d_ != 0 : i_ != 0;
    else if constexpr (std::is_integral_v<T>) return static_cast<T>(i_);
    else return static_cast<T>(kind_ == Kind::Float ? d_ : static_cast<double>(i_));
  }
  /// The dtype a bare number takes: bool, i64 or the default float (f32).
  DType default_dtype() const {
    return kind_ == Kind::Bool ? DType::b8 : kind_ == Kind::Int ? DType::i64 : kDefaultFloat;
  }

 private:
  /// A float's integer value, clamped to int64's range (NaN: 0); a plain cast of inf or of a
  /// value past 2^63 is undefined behaviour (UBSan's float-cast-overflow).
  static int64_t saturate(double d) {
    if (d != d) return 0;
    if (d >= 9223372036854775807.0) return INT64_MAX;
    if (d <= -9223372036854775808.0) return INT64_MIN;
    return static_cast<int64_t>(d);
  }
  Kind kind_;
  int64_t i_ = 0;
  double d_ = 0;
};

}  // namespace kiln
