#include "distributed/store/socket_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <thread>

#include "core/error.h"
#include "distributed/store/errors.h"

namespace kiln::dist {

std::string format_address(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r may return a static string instead of filling buf.
  const char* s = strerror_r(err, buf, sizeof buf);
  return s;
}

void set_nodelay(int fd, const std::string& what) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0)
    fail("{}: setsockopt(TCP_NODELAY) failed: {}", what, errno_text(errno));
}

void set_nonblocking(int fd, const std::string& what) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0)
    fail("{}: fcntl(O_NONBLOCK) failed: {}", what, errno_text(errno));
}

int poll_timeout_ms(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, INT_MAX));
}

Clock::time_point deadline_after(std::chrono::milliseconds d) {
  // About 30 years: far beyond any job, far from overflowing steady_clock's int64 nanoseconds.
  constexpr std::chrono::milliseconds kCap{int64_t{1} << 40};
  return Clock::now() + std::clamp(d, std::chrono::milliseconds(0), kCap);
}

namespace {

// One non-blocking connect attempt bounded by `deadline`; returns the errno (0 on success).
int try_connect(int fd, const addrinfo& ai, Clock::time_point deadline) {
  if (::connect(fd, ai.ai_addr, ai.ai_addrlen) == 0) return 0;
  if (errno != EINPROGRESS) return errno;
  pollfd p{fd, POLLOUT, 0};
  int r;
  do {
    r = ::poll(&p, 1, poll_timeout_ms(deadline));
  } while (r < 0 && errno == EINTR);
  if (r < 0) return errno;
  if (r == 0) return ETIMEDOUT;
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

}  // namespace

Fd connect_with_retry(const std::string& host, int port, std::chrono::milliseconds timeout) {
  const std::string addr = format_address(host, port);
  const Clock::time_point deadline = deadline_after(timeout);
  std::chrono::milliseconds backoff{10};
  std::string last_error = "no address to try";
  for (;;) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
    if (rc == EAI_SYSTEM) {
      last_error = fmt::format("getaddrinfo: {}", errno_text(errno));
    } else if (rc == EAI_AGAIN) {
      // A temporary DNS failure (e.g. the master's name not yet published): worth retrying.
      last_error = fmt::format("getaddrinfo: {}", gai_strerror(rc));
    } else if (rc != 0) {
      fail("TcpStore: cannot resolve host \"{}\" (address {}): {}", host, addr, gai_strerror(rc));
    } else {
      std::unique_ptr<addrinfo, void (*)(addrinfo*)> guard(res, freeaddrinfo);
      for (const addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
        if (!fd.valid()) {
          last_error = fmt::format("socket: {}", errno_text(errno));
          continue;
        }
        // Bounded per attempt so that one black-holed address cannot eat the whole timeout.
        auto attempt_deadline = std::min(deadline, Clock::now() + std::chrono::seconds(10));
        int err = try_connect(fd.get(), *ai, attempt_deadline);
        if (err != 0) {
          last_error = fmt::format("connect: {}", errno_text(err));
          continue;
        }
        int flags = fcntl(fd.get(), F_GETFL);
        if (flags < 0 || fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
          fail("TcpStore: fcntl on the socket to {} failed: {}", addr, errno_text(errno));
        set_nodelay(fd.get(), "TcpStore: socket to " + addr);
        return fd;
      }
    }
    auto now = Clock::now();
    if (now >= deadline)
      KILN_DIST_FAIL(TimeoutError, "TcpStore: could not connect to the store server at {} within {} ms: {}", addr,
                     timeout.count(), last_error);
    std::this_thread::sleep_for(std::min<Clock::duration>(backoff, deadline - now));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

Fd listen_tcp(int port, int backlog) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) fail("TcpStore: socket() failed: {}", errno_text(errno));
  // Lets a restarted job bind the port while the last job's connections sit in TIME_WAIT.
  int one = 1;
  if (setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
    fail("TcpStore: setsockopt(SO_REUSEADDR) failed: {}", errno_text(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    fail("TcpStore: cannot bind port {} for the store server: {}", port, errno_text(errno));
  if (::listen(fd.get(), backlog) != 0)
    fail("TcpStore: listen() on port {} failed: {}", port, errno_text(errno));
  return fd;
}

int local_port(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    fail("TcpStore: getsockname failed: {}", errno_text(errno));
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port);
  fail("TcpStore: getsockname returned address family {}", static_cast<int>(a.ss_family));
}

std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "";
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(res, freeaddrinfo);
  // Connecting a UDP socket sends nothing: the kernel only picks the route and source address.
  Fd fd(::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0 || ::connect(fd.get(), res->ai_addr, res->ai_addrlen) != 0) return "";
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {};
  const void* addr = a.ss_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&a)->sin_addr)
                                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&a)->sin6_addr);
  return inet_ntop(a.ss_family, addr, text, sizeof text) != nullptr ? text : "";
}

namespace {

// Waits until fd is ready for `events` or the deadline passes (then throws naming `what`).
void wait_ready(int fd, short events, Clock::time_point deadline, const std::string& peer, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int r = ::poll(&p, 1, poll_timeout_ms(deadline));
    if (r > 0) return;  // errors and hang-ups surface in the send/recv that follows
    if (r < 0 && errno != EINTR)
      fail("poll on the connection to the store server at {} failed: {}", peer, errno_text(errno));
    if (r == 0) KILN_DIST_FAIL(TimeoutError, "timed out {} the store server at {}", what, peer);
  }
}

}  // namespace

void send_all(int fd, const void* data, size_t n, Clock::time_point deadline, const std::string& peer) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_ready(fd, POLLOUT, deadline, peer, "sending to");
    } else if (k < 0 && errno != EINTR) {
      KILN_DIST_FAIL(PeerError, "sending to the store server at {} failed: {}", peer, errno_text(errno));
    }
  }
}

bool recv_exact(int fd, void* data, size_t n, Clock::time_point deadline, const std::string& peer, bool eof_ok) {
  auto* p = static_cast<uint8_t*>(data);
  size_t got = 0;
  while (got < n) {
    ssize_t k = ::recv(fd, p + got, n - got, MSG_DONTWAIT);
    if (k > 0) {
      got += static_cast<size_t>(k);
    } else if (k == 0) {
      if (got == 0 && eof_ok) return false;
      KILN_DIST_FAIL(PeerError, "the store server at {} closed the connection", peer);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_ready(fd, POLLIN, deadline, peer, "waiting for a reply from");
    } else if (errno != EINTR) {
      KILN_DIST_FAIL(PeerError, "receiving from the store server at {} failed: {}", peer, errno_text(errno));
    }
  }
  return true;
}

}  // namespace kiln::dist
