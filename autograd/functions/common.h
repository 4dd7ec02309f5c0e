// Shared pieces of the derivative formulas (autograd/functions/*.cc): each file attaches the
// backward of one op family to its primitives in core's op table.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

#include "autograd/node.h"
#include "core/grad_mode.h"
#include "core/op_table.h"
#include "core/ops.h"

namespace kiln::autograd {

/// "MulBackward" from "mul": the node name PyTorch users recognise.
inline std::string backward_name(std::string_view kind) {
  std::string s(kind);
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return s + "Backward";
}

/// Runs a primitive's forward without recording anything.
template <class F> auto forward_no_grad(F&& f) {
  NoGradGuard g;
  return f();
}

}  // namespace kiln::autograd

/// KILN_REGISTER_AUTOGRAD(binary, &binary_autograd) at namespace scope.
#define KILN_REGISTER_AUTOGRAD(NAME, FN)                                               \
  static ::kiln::detail::Registrar KILN_CONCAT_(kiln_autograd_reg_, __COUNTER__)(       \
      [] { ::kiln::op::NAME.set_autograd(FN); })
