#include "distributed/store/tcp_store_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "distributed/store/socket_util.h"
#include "distributed/store/store.h"
#include "distributed/store/store_value.h"
#include "distributed/store/tcp_store_protocol.h"

namespace kiln::dist {
namespace {

using wire::Op;
using wire::Status;

constexpr size_t kReadChunk = 64 * 1024;
// Stop reading from a client whose replies pile up unread, or whose unparsed input already
// holds the largest legal frame: memory per connection stays bounded.
constexpr size_t kOutHighWater = 1u << 20;
constexpr size_t kInCap = wire::kMaxFrame + 4 + kReadChunk;

struct Parked {
  Op op;
  std::vector<std::string> keys;
  Clock::time_point deadline;
};

struct Conn {
  Fd fd;
  std::string peer;
  bool hello_done = false;
  bool closed = false;
  std::vector<uint8_t> in;
  size_t in_off = 0;
  std::vector<uint8_t> out;
  size_t out_off = 0;
  std::optional<Parked> parked;

  size_t unparsed() const { return in.size() - in_off; }
  size_t unsent() const { return out.size() - out_off; }
};

std::string peer_name(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET) {
    const auto* s = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &s->sin_addr, buf, sizeof buf);
    return format_address(buf, ntohs(s->sin_port));
  }
  if (a.ss_family == AF_INET6) {
    const auto* s = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &s->sin6_addr, buf, sizeof buf);
    return format_address(buf, ntohs(s->sin6_port));
  }
  return "?";
}

}  // namespace

class TcpStoreServer::Impl {
 public:
  explicit Impl(int port) : listen_(listen_tcp(port, 512)) {
    port_ = local_port(listen_.get());
    wake_.reset(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake_.valid()) fail("TcpStore server: eventfd failed: {}", errno_text(errno));
    thread_ = std::thread([this] { run(); });
  }

  /// No socket, no thread, no log: for replay().
  struct Offline {};
  explicit Impl(Offline) : log_(false) {}

  ~Impl() {
    if (!thread_.joinable()) return;
    stop_.store(true);
    uint64_t one = 1;
    // Cannot fail short of a full counter; the loop also re-checks stop_ on every wake-up.
    if (::write(wake_.get(), &one, sizeof one) < 0)
      std::fprintf(stderr, "kiln TcpStore server: waking the server thread failed: %s\n",
                   errno_text(errno).c_str());
    thread_.join();
  }

  int port() const { return port_; }

  TcpStoreReplay replay(const std::vector<Bytes>& streams);

 private:
  void run();
  void accept_all();
  void read_from(Conn& c);
  void serve(Conn& c);
  void handle_hello(Conn& c);
  void handle_frame(Conn& c, const uint8_t* body, size_t n);
  bool all_present(const std::vector<std::string>& keys) const;
  void answer_parked(Conn& c, bool timed_out);
  void wake_satisfied();
  void expire(Clock::time_point now);
  void flush(Conn& c);
  // Closes `c`; a non-empty `why` (a protocol violation) is reported on stderr.
  void drop(Conn& c, const std::string& why);

  void reply(Conn& c, wire::Writer& w) {
    std::vector<uint8_t> frame = w.finish();
    c.out.insert(c.out.end(), frame.begin(), frame.end());
  }
  void reply_ok(Conn& c) {
    wire::Writer w;
    w.u8(static_cast<uint8_t>(Status::kOk));
    reply(c, w);
  }
  void reply_error(Conn& c, const std::string& msg) {
    wire::Writer w;
    w.u8(static_cast<uint8_t>(Status::kError)).str(msg);
    reply(c, w);
  }

  Fd listen_;
  Fd wake_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  // Touched only by the server thread.
  std::unordered_map<std::string, Bytes> data_;
  std::vector<std::unique_ptr<Conn>> conns_;
  bool mutated_ = false;
  Clock::time_point accept_paused_until_{};
  bool log_ = true;
};

void TcpStoreServer::Impl::drop(Conn& c, const std::string& why) {
  if (!why.empty() && log_)
    std::fprintf(stderr, "kiln TcpStore server (port %d): closing the connection from %s: %s\n", port_,
                 c.peer.c_str(), why.c_str());
  // Best effort: a client refused for its protocol version still gets our hello, which says
  // which version we speak.
  if (!c.closed && c.unsent() > 0 && c.fd.valid()) {
    ssize_t ignored = ::send(c.fd.get(), c.out.data() + c.out_off, c.unsent(), MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)ignored;
  }
  c.closed = true;
  c.parked.reset();
}

void TcpStoreServer::Impl::accept_all() {
  for (;;) {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    int fd = ::accept4(listen_.get(), reinterpret_cast<sockaddr*>(&a), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      // Out of descriptors or memory: the pending connection stays readable, so pause accepting
      // briefly instead of spinning on it.
      std::fprintf(stderr, "kiln TcpStore server (port %d): accept failed: %s\n", port_, errno_text(errno).c_str());
      accept_paused_until_ = Clock::now() + std::chrono::milliseconds(100);
      return;
    }
    auto c = std::make_unique<Conn>();
    c->fd.reset(fd);
    c->peer = peer_name(a);
    try {
      set_nodelay(fd, "TcpStore server");
    } catch (const Error& e) {
      std::fprintf(stderr, "kiln TcpStore server (port %d): %s\n", port_, e.what());
      continue;
    }
    conns_.push_back(std::move(c));
  }
}

void TcpStoreServer::Impl::read_from(Conn& c) {
  size_t at = c.in.size();
  c.in.resize(at + kReadChunk);
  const ssize_t k = ::recv(c.fd.get(), c.in.data() + at, kReadChunk, 0);
  const int err = errno;
  c.in.resize(at + static_cast<size_t>(std::max<ssize_t>(k, 0)));
  // A hang-up or reset, possibly mid-message: a client that exits is normal, nothing to report.
  if (k == 0 || (k < 0 && err != EAGAIN && err != EWOULDBLOCK && err != EINTR)) drop(c, "");
}

void TcpStoreServer::Impl::handle_hello(Conn& c) {
  const uint8_t* p = c.in.data() + c.in_off;
  if (!std::equal(p, p + 4, wire::kMagic)) return drop(c, "it did not open with the TcpStore hello");
  uint32_t version = wire::get_u32(p + 4);
  c.in_off += wire::kHelloSize;
  std::vector<uint8_t> h = wire::hello();
  c.out.insert(c.out.end(), h.begin(), h.end());
  if (version != wire::kVersion)
    return drop(c, fmt::format("it speaks protocol version {}, this server {}", version, wire::kVersion));
  c.hello_done = true;
}

bool TcpStoreServer::Impl::all_present(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return data_.count(k) != 0; });
}

void TcpStoreServer::Impl::handle_frame(Conn& c, const uint8_t* body, size_t n) {
  wire::Reader r(body, n);
  const uint8_t op_byte = r.u8();
  switch (static_cast<Op>(op_byte)) {
    case Op::kSet: {
      std::string key = r.str();
      Bytes value = r.bytes();
      r.expect_end();
      data_[key] = std::move(value);
      mutated_ = true;
      return reply_ok(c);
    }
    case Op::kGet:
    case Op::kWait: {
      const Op op = static_cast<Op>(op_byte);
      std::vector<std::string> keys;
      if (op == Op::kGet) keys.push_back(r.str());
      else keys = r.strs();
      uint64_t timeout_ms = r.u64();
      r.expect_end();
      const Millis timeout(static_cast<int64_t>(std::min<uint64_t>(timeout_ms, INT64_MAX)));
      c.parked = Parked{op, std::move(keys), deadline_after(timeout)};
      if (all_present(c.parked->keys)) answer_parked(c, false);
      return;
    }
    case Op::kAdd: {
      std::string key = r.str();
      int64_t delta = r.i64();
      r.expect_end();
      int64_t sum = 0;
      auto it = data_.find(key);
      try {
        sum = added_value(key, it == data_.end() ? nullptr : &it->second, delta);
      } catch (const Error& e) {
        return reply_error(c, e.what());
      }
      data_[key] = int_value(sum);
      mutated_ = true;
      wire::Writer w;
      w.u8(static_cast<uint8_t>(Status::kOk)).i64(sum);
      return reply(c, w);
    }
    case Op::kCheck: {
      std::vector<std::string> keys = r.strs();
      r.expect_end();
      wire::Writer w;
      w.u8(static_cast<uint8_t>(Status::kOk)).u8(all_present(keys) ? 1 : 0);
      return reply(c, w);
    }
    case Op::kDelete: {
      std::string key = r.str();
      r.expect_end();
      wire::Writer w;
      w.u8(static_cast<uint8_t>(Status::kOk)).u8(data_.erase(key) != 0 ? 1 : 0);
      return reply(c, w);
    }
  }
  throw wire::Malformed(fmt::format("unknown request op {}", op_byte));
}

void TcpStoreServer::Impl::answer_parked(Conn& c, bool timed_out) {
  Parked p = std::move(*c.parked);
  c.parked.reset();
  wire::Writer w;
  if (timed_out) {
    std::vector<std::string> missing;
    for (const auto& k : p.keys)
      if (!data_.count(k)) missing.push_back(k);
    w.u8(static_cast<uint8_t>(Status::kTimeout)).strs(missing);
  } else {
    w.u8(static_cast<uint8_t>(Status::kOk));
    if (p.op == Op::kGet) {
      const Bytes& v = data_.at(p.keys[0]);
      w.bytes(v.data(), v.size());
    }
  }
  reply(c, w);
}

// Handles every complete message buffered for `c`, until it parks or its replies pile up.
void TcpStoreServer::Impl::serve(Conn& c) {
  while (!c.closed && !c.parked && c.unsent() < kOutHighWater) {
    const size_t avail = c.unparsed();
    const uint8_t* p = c.in.data() + c.in_off;
    if (!c.hello_done) {
      // Garbage is refused as soon as the first bytes disagree with the magic.
      if (!std::equal(p, p + std::min<size_t>(avail, 4), wire::kMagic))
        return drop(c, "it did not open with the TcpStore hello");
      if (avail < wire::kHelloSize) break;
      handle_hello(c);
      continue;
    }
    if (avail < 4) break;
    const uint32_t len = wire::get_u32(p);
    if (len == 0 || len > wire::kMaxFrame)
      return drop(c, fmt::format("message length {} is outside 1..{}", len, wire::kMaxFrame));
    if (avail < 4 + size_t{len}) break;
    try {
      handle_frame(c, p + 4, len);
    } catch (const wire::Malformed& e) {
      return drop(c, fmt::format("malformed message: {}", e.what()));
    }
    c.in_off += 4 + size_t{len};
  }
  // Keeps the buffer from growing without bound on a long-lived connection.
  if (c.in_off > 0 && (c.in_off == c.in.size() || c.in_off > kReadChunk)) {
    c.in.erase(c.in.begin(), c.in.begin() + static_cast<ptrdiff_t>(c.in_off));
    c.in_off = 0;
  }
}

void TcpStoreServer::Impl::flush(Conn& c) {
  while (c.unsent() > 0 && !c.closed) {
    ssize_t k = ::send(c.fd.get(), c.out.data() + c.out_off, c.unsent(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0) {
      c.out_off += static_cast<size_t>(k);
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return;
    } else if (k < 0 && errno != EINTR) {
      drop(c, "");  // the client went away
    }
  }
  c.out.clear();
  c.out_off = 0;
}

// A set or add may satisfy parked requests; answering one lets its connection go on to further
// buffered requests, which may themselves set keys, so repeat until nothing changes.
void TcpStoreServer::Impl::wake_satisfied() {
  while (mutated_) {
    mutated_ = false;
    for (auto& c : conns_) {
      if (c->parked && all_present(c->parked->keys)) {
        answer_parked(*c, false);
        serve(*c);
      }
    }
  }
}

void TcpStoreServer::Impl::expire(Clock::time_point now) {
  for (auto& c : conns_) {
    if (c->parked && c->parked->deadline <= now) {
      answer_parked(*c, true);
      serve(*c);
    }
  }
}

void TcpStoreServer::Impl::run() {
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    const Clock::time_point now = Clock::now();
    fds.push_back({now >= accept_paused_until_ ? listen_.get() : -1, POLLIN, 0});
    Clock::time_point next = Clock::time_point::max();
    if (now < accept_paused_until_) next = accept_paused_until_;
    for (auto& c : conns_) {
      short ev = 0;
      if (c->unparsed() < kInCap && c->unsent() < kOutHighWater) ev |= POLLIN;
      if (c->unsent() > 0) ev |= POLLOUT;
      fds.push_back({c->fd.get(), ev, 0});
      if (c->parked) next = std::min(next, c->parked->deadline);
    }
    const int timeout = next == Clock::time_point::max() ? -1 : poll_timeout_ms(next);
    if (::poll(fds.data(), fds.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "kiln TcpStore server (port %d): poll failed: %s\n", port_, errno_text(errno).c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (stop_.load()) break;
    if (fds[1].revents != 0) accept_all();
    // conns_ may have grown in accept_all: only the first fds.size() - 2 have poll results.
    for (size_t i = 2; i < fds.size(); ++i) {
      Conn& c = *conns_[i - 2];
      const short re = fds[i].revents;
      if (re == 0) continue;
      try {
        if (re & POLLOUT) flush(c);
        if (!c.closed && (re & (POLLIN | POLLERR | POLLHUP))) read_from(c);
        // Also after a flush alone: requests held back while replies piled up can go on now.
        if (!c.closed) serve(c);
      } catch (const std::exception& e) {
        // bad_alloc for a huge-but-legal frame, or the like: lose this client, not the server.
        drop(c, e.what());
      }
    }
    try {
      expire(Clock::now());
      wake_satisfied();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kiln TcpStore server (port %d): %s\n", port_, e.what());
    }
    for (auto& c : conns_)
      if (!c->closed && c->unsent() > 0) flush(*c);
    std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) { return c->closed; });
  }
}

TcpStoreReplay TcpStoreServer::Impl::replay(const std::vector<Bytes>& streams) {
  TcpStoreReplay out;
  out.replies.resize(streams.size());
  for (const Bytes& s : streams) {
    conns_.push_back(std::make_unique<Conn>());
    conns_.back()->peer = "replay";
    conns_.back()->in = s;
  }
  // As run() does per poll round: serve, then wake parked requests; what flush() would send
  // is moved to `out` instead. A round that changes nothing ends the replay, after one more
  // round with every parked request timed out if some are left.
  auto state = [&] {
    std::vector<std::tuple<size_t, bool, bool>> s;
    for (auto& c : conns_) s.emplace_back(c->unparsed(), c->parked.has_value(), c->closed);
    return s;
  };
  auto guarded = [&](Conn& c, auto&& step) {
    try {
      step();
    } catch (const std::exception& e) {
      drop(c, e.what());
    }
  };
  for (;;) {
    const auto before = state();
    for (auto& c : conns_)
      if (!c->closed) guarded(*c, [&] { serve(*c); });
    try {
      wake_satisfied();
    } catch (const std::exception&) {
      // run() logs and goes on; so does the replay.
    }
    bool sent = false;
    for (size_t i = 0; i < conns_.size(); ++i) {
      Conn& c = *conns_[i];
      sent = sent || c.unsent() > 0;
      out.replies[i].insert(out.replies[i].end(), c.out.begin() + static_cast<ptrdiff_t>(c.out_off), c.out.end());
      c.out.clear();
      c.out_off = 0;
    }
    if (sent || state() != before) continue;
    const bool parked = std::any_of(conns_.begin(), conns_.end(), [](auto& c) { return c->parked.has_value(); });
    if (!parked) break;
    try {
      expire(Clock::time_point::max());
    } catch (const std::exception&) {
    }
  }
  for (auto& c : conns_) out.closed.push_back(c->closed);
  return out;
}

TcpStoreReplay replay_tcp_store_server(const std::vector<Bytes>& streams) {
  TcpStoreServer::Impl impl{TcpStoreServer::Impl::Offline{}};
  return impl.replay(streams);
}

TcpStoreServer::TcpStoreServer(int port) : impl_(std::make_unique<Impl>(port)) {}
TcpStoreServer::~TcpStoreServer() = default;
int TcpStoreServer::port() const { return impl_->port(); }

}  // namespace kiln::dist
