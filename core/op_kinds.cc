// Kind names, each table generated from (or checked against) the kinds it names.
#include "core/op_kinds.h"

#include <iterator>

namespace kiln {

std::string_view kind_name(UnaryKind k) {
  static constexpr std::string_view names[] = {
#define KILN_UNARY_NAME_(NAME, ...) #NAME,
      KILN_UNARY_OPS(KILN_UNARY_NAME_)
#undef KILN_UNARY_NAME_
  };
  static_assert(std::size(names) == kNumUnaryKinds);
  // Public names where they differ from the kind's: pow(x, 2.0), gelu(x, "tanh").
  if (k == UnaryKind::pow_scalar) return "pow";
  return names[static_cast<int>(k)];
}

std::string_view kind_name(BinaryKind k) {
  static constexpr std::string_view names[] = {
#define KILN_BINARY_NAME_(NAME, ...) #NAME,
      KILN_BINARY_OPS(KILN_BINARY_NAME_)
#undef KILN_BINARY_NAME_
  };
  static_assert(std::size(names) == kNumBinaryKinds);
  return names[static_cast<int>(k)];
}

std::string_view kind_name(CompareKind k) {
  static constexpr std::string_view names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  static_assert(std::size(names) == static_cast<int>(CompareKind::ge) + 1);
  return names[static_cast<int>(k)];
}

std::string_view kind_name(ReduceKind k) {
  static constexpr std::string_view names[] = {"sum", "mean", "max", "min", "prod"};
  static_assert(std::size(names) == static_cast<int>(ReduceKind::prod) + 1);
  return names[static_cast<int>(k)];
}

}  // namespace kiln
