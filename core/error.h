// Kiln's exception types and the two check macros every layer uses.
// Promise: a failed check throws kiln::Error (or a subclass callers can tell apart) whose message
// names the op, the offending values and the file:line; nothing in Kiln calls abort() or exit().
#pragma once

#include <fmt/core.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace kiln {

/// Every error Kiln throws derives from this, so `catch (const kiln::Error&)` catches them all.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A kernel or feature that exists in the API but not for this device or configuration.
class NotImplementedError : public Error {
 public:
  using Error::Error;
};

/// Kiln broke one of its own invariants (KILN_ASSERT): a bug in Kiln, not in the caller's input.
class InternalError : public Error {
 public:
  using Error::Error;
};

/// Throws kiln::Error with a fmt-formatted message.
template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

/// Throws E with a fmt-formatted message (E derives from kiln::Error).
template <class E, class... Args>
[[noreturn]] void fail_as(fmt::format_string<Args...> f, Args&&... args) {
  throw E(fmt::format(f, std::forward<Args>(args)...));
}

namespace detail {
/// `message [file:line]`: the source location of a failed check, appended for bug reports.
inline std::string with_location(std::string message, const char* file, int line) {
  return fmt::format("{} [{}:{}]", message, file, line);
}
}  // namespace detail

}  // namespace kiln

/// Shapes, strides and dim lists (std::vector<int64_t>) in messages, as "[2, 3]" (fmt/ranges.h's
/// form). Declared here, with fmt/core.h only, so the ~150 translation units a build compiles do
/// not each parse fmt/format.h and fmt/ranges.h for it (about 0.2 s apiece); core/error.cc has
/// the body.
template <> struct fmt::formatter<std::vector<int64_t>> {
  constexpr auto parse(format_parse_context& ctx) { return ctx.begin(); }
  format_context::iterator format(const std::vector<int64_t>& v, format_context& ctx) const;
};

/// KILN_CHECK(cond, "op: shapes {} and {} differ", a, b) — for the caller's input: throws
/// kiln::Error "op: shapes [2] and [3] differ [core/ops/add.cc:42]" when cond is false.
#define KILN_CHECK(cond, ...)                                                                   \
  do {                                                                                          \
    if (!(cond)) throw ::kiln::Error(::kiln::detail::with_location(fmt::format(__VA_ARGS__), __FILE__, __LINE__)); \
  } while (0)

/// KILN_ASSERT(cond, "what should hold", args...) — for Kiln's own invariants, never for user
/// input: throws kiln::InternalError "internal error: <cond>: <message> [file:line] (a bug in
/// Kiln; please report it)". Checked in every build mode.
#define KILN_ASSERT(cond, ...)                                                                  \
  do {                                                                                          \
    if (!(cond))                                                                                \
      throw ::kiln::InternalError(::kiln::detail::with_location(                                \
          fmt::format("internal error: {}: {}", #cond, fmt::format(__VA_ARGS__)), __FILE__, __LINE__) + \
          " (a bug in Kiln; please report it)");                                                \
  } while (0)
