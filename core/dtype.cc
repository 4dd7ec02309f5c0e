// DType tables and PyTorch's promotion lattice.
#include "core/dtype.h"

#include <fmt/format.h>

namespace kiln {

size_t element_size(DType t) {
  static constexpr size_t sizes[] = {1, 4, 8, 2, 2, 4, 8};
  return sizes[static_cast<int>(t)];
}

std::string_view dtype_name(DType t) {
  static constexpr std::string_view names[] = {"bool", "i32", "i64", "f16", "bf16", "f32", "f64"};
  return names[static_cast<int>(t)];
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  // f16 and bf16 cannot hold each other's values: they meet at f32, as in PyTorch.
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16)) return DType::f32;
  return a > b ? a : b;  // the enum is ordered bool < i32 < i64 < f16|bf16 < f32 < f64
}

}  // namespace kiln

fmt::format_context::iterator fmt::formatter<kiln::DType>::format(kiln::DType t, format_context& ctx) const {
  return formatter<std::string_view>::format(kiln::dtype_name(t), ctx);
}
