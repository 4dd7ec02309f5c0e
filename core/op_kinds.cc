#include "core/op_kinds.h"

namespace kiln {

std::string_view kind_name(UnaryKind k) {
  static constexpr std::string_view names[] = {
      "neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid", "relu",
      "gelu", "silu", "square", "sign", "log1p", "expm1", "reciprocal", "pow", "clamp"};
  return names[static_cast<int>(k)];
}

std::string_view kind_name(BinaryKind k) {
  static constexpr std::string_view names[] = {
      "add", "sub", "mul", "div", "pow", "maximum", "minimum", "relu_backward", "gelu_backward",
      "silu_backward", "sigmoid_backward", "tanh_backward"};
  return names[static_cast<int>(k)];
}

std::string_view kind_name(CompareKind k) {
  static constexpr std::string_view names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  return names[static_cast<int>(k)];
}

std::string_view kind_name(ReduceKind k) {
  static constexpr std::string_view names[] = {"sum", "mean", "max", "min", "prod"};
  return names[static_cast<int>(k)];
}

}  // namespace kiln
