// The body of core/error.h's formatter for shapes: "[2, 3]", as fmt/ranges.h writes a vector.
#include "core/error.h"

#include <fmt/format.h>

fmt::format_context::iterator fmt::formatter<std::vector<int64_t>>::format(const std::vector<int64_t>& v,
                                                                            format_context& ctx) const {
  auto out = ctx.out();
  *out++ = '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out = fmt::format_to(out, ", ");
    out = fmt::format_to(out, "{}", v[i]);
  }
  *out++ = ']';
  return out;
}
