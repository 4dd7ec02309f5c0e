// Small POSIX socket helpers for the TCP store: name resolution, connecting with
// retries until a deadline, and whole-buffer send/receive that honour a deadline. Every failed
// syscall throws kiln::Error naming the peer and the errno text.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/util/fd.h"

namespace kiln::dist {

using Clock = std::chrono::steady_clock;

using kiln::Fd;  // core/util/fd.h

/// "host:port", with IPv6 literals bracketed.
std::string format_address(const std::string& host, int port);

/// strerror_r of `err` as a std::string.
std::string errno_text(int err);

/// Turns off Nagle's algorithm: the store's requests are small and latency-bound.
void set_nodelay(int fd, const std::string& what);
void set_nonblocking(int fd, const std::string& what);

/// Connects to host:port, retrying failed attempts (the server may not have started yet) for at
/// most `timeout`. Returns a blocking socket with TCP_NODELAY set. A host name that cannot be
/// resolved fails at once (a typo should not cost the whole timeout).
Fd connect_with_retry(const std::string& host, int port, std::chrono::milliseconds timeout);

/// A listening, non-blocking IPv4 socket on all interfaces at `port` (0: the kernel picks one).
Fd listen_tcp(int port, int backlog);
/// The local port a socket is bound to.
int local_port(int fd);

/// The address of this host on the route to `host` (what a peer there can reach us at), or ""
/// when `host` does not resolve or is unreachable. Sends no packet.
std::string local_address_towards(const std::string& host);

/// Sends every byte (no SIGPIPE). Throws on error or if the deadline passes first.
void send_all(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& peer);

/// Receives exactly n bytes. Returns false if the peer closed the connection before the first
/// byte when `eof_ok`; throws on error, a close mid-buffer, or the deadline passing.
bool recv_exact(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& peer,
                bool eof_ok = false);

/// Milliseconds from now until `deadline`, clamped to [0, INT_MAX] for poll().
int poll_timeout_ms(Clock::time_point deadline);

/// A deadline `d` from now that never overflows the clock (huge timeouts mean "a very long time").
Clock::time_point deadline_after(std::chrono::milliseconds d);

}  // namespace kiln::dist
