// Kiln's one exception type and the check macro every layer uses.
// Promise: a failed check throws kiln::Error whose message names the op and the offending
// values; nothing in Kiln calls abort() or exit() on bad input.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>

namespace kiln {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Throws kiln::Error with a fmt-formatted message.
template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kiln

/// KILN_CHECK(cond, "op: shapes {} and {} differ", a, b) — throws kiln::Error when cond is false.
#define KILN_CHECK(cond, ...)          \
  do {                                 \
    if (!(cond)) ::kiln::fail(__VA_ARGS__); \
  } while (0)
