// The errors collectives and stores throw, so callers can tell a slow job from a dead one:
// TimeoutError when a deadline passed, PeerError when a peer (a rank or the store server) went
// away. Both derive from kiln::Error, so `catch (const kiln::Error&)` still catches them.
#pragma once

#include <exception>
#include <string>

#include "core/error.h"

namespace kiln::dist {

/// A collective, a store wait or a connection did not complete within its timeout.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

/// A peer closed the connection, reset it, or exited (a rank, or the store server).
class PeerError : public Error {
 public:
  using Error::Error;
};

/// Throws `message` as the same kind of error as `cause` (TimeoutError, PeerError, else Error):
/// for sites that add context to an error from below without hiding what kind it is.
[[noreturn]] inline void rethrow_as(const std::exception& cause, std::string message) {
  if (dynamic_cast<const TimeoutError*>(&cause)) throw TimeoutError(std::move(message));
  if (dynamic_cast<const PeerError*>(&cause)) throw PeerError(std::move(message));
  throw Error(std::move(message));
}

}  // namespace kiln::dist

/// KILN_DIST_FAIL(TimeoutError, "fmt", args...): throws kiln::dist::TimeoutError (or PeerError)
/// with the formatted message and the file:line it was thrown from.
#define KILN_DIST_FAIL(TYPE, ...) \
  throw ::kiln::dist::TYPE(::kiln::detail::with_location(fmt::format(__VA_ARGS__), __FILE__, __LINE__))
