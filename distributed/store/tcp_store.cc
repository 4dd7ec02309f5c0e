#include "distributed/store/tcp_store.h"

#include <algorithm>

#include "core/error.h"
#include "distributed/store/errors.h"
#include "distributed/store/store_value.h"
#include "distributed/store/tcp_store_server.h"

namespace kiln::dist {
namespace {

// How much longer than a request's own timeout the client waits for the server's answer
// before deciding the server is gone (a stopped or overloaded server process).
constexpr Millis kReplyGrace{30000};

// Deadline for the answer to a request the server may take `t` to answer.
Clock::time_point reply_deadline(Millis t) {
  return deadline_after(std::min(t, Millis(int64_t{1} << 40)) + kReplyGrace);
}

std::string describe_wait(const std::vector<std::string>& keys, const std::vector<std::string>& missing) {
  if (keys.size() == 1) return "key " + quoted_keys(keys);
  return fmt::format("keys {} (still missing: {})", quoted_keys(keys), quoted_keys(missing));
}

}  // namespace

TcpStore::TcpStore(std::string host, int port, int world_size, bool is_server, Millis timeout)
    : host_(std::move(host)), port_(port), world_size_(world_size) {
  timeout_ = std::max(timeout, Millis(0));
  KILN_CHECK(!host_.empty(), "TcpStore: the host name is empty");
  KILN_CHECK(port >= 0 && port <= 65535, "TcpStore: port {} is out of range 0..65535 (host \"{}\")", port, host_);
  KILN_CHECK(port != 0 || is_server,
             "TcpStore: a client needs the server's port; port 0 (pick a free port) is only valid for the server "
             "(host \"{}\")",
             host_);
  if (is_server) {
    server_ = std::make_unique<TcpStoreServer>(port);
    port_ = server_->port();
  }
  connect_to_server();
}

TcpStore::~TcpStore() = default;

void TcpStore::connect_to_server() {
  const std::string addr = address();
  Fd fd = connect_with_retry(host_, port_, timeout_);
  const Clock::time_point deadline = deadline_after(timeout_);
  try {
    std::vector<uint8_t> h = wire::hello();
    send_all(fd.get(), h.data(), h.size(), deadline, addr);
    uint8_t reply[wire::kHelloSize];
    if (!recv_exact(fd.get(), reply, sizeof reply, deadline, addr, /*eof_ok=*/true))
      fail("the server closed the connection without a hello");
    if (!std::equal(reply, reply + 4, wire::kMagic)) fail("the server's reply does not start with the TcpStore hello");
    const uint32_t version = wire::get_u32(reply + 4);
    if (version != wire::kVersion)
      fail("the server speaks protocol version {}, this client version {}", version, wire::kVersion);
  } catch (const Error& e) {
    fail("TcpStore: connecting to the store server at {} failed (is it a Kiln TcpStore of the same version?): {}",
         addr, e.what());
  }
  sock_ = std::move(fd);
}

std::vector<uint8_t> TcpStore::call(wire::Writer& request, const std::string& what, Millis reply_within,
                                    const std::vector<std::string>& waited_keys) {
  if (request.body_size() > wire::kMaxFrame)
    fail("TcpStore {}: the request is {} bytes, over the {}-byte message limit", what, request.body_size(),
         wire::kMaxFrame);
  const std::vector<uint8_t> frame = request.finish();
  const std::string addr = address();
  std::lock_guard<std::mutex> lock(mu_);
  if (!lost_.empty())
    KILN_DIST_FAIL(PeerError, "TcpStore {}: the connection to the store server at {} was lost earlier: {}", what, addr,
                   lost_);
  std::vector<uint8_t> body;
  try {
    send_all(sock_.get(), frame.data(), frame.size(), reply_deadline(timeout_), addr);
    const Clock::time_point deadline = reply_deadline(reply_within);
    uint8_t len_bytes[4];
    recv_exact(sock_.get(), len_bytes, 4, deadline, addr);
    const uint32_t len = wire::get_u32(len_bytes);
    if (len == 0 || len > wire::kMaxFrame)
      fail("the store server at {} sent a reply of {} bytes, outside 1..{}", addr, len, wire::kMaxFrame);
    body.resize(len);
    recv_exact(sock_.get(), body.data(), len, deadline, addr);
  } catch (const Error& e) {
    lose_connection_locked(e.what());
    rethrow_as(e, fmt::format("TcpStore {}: {}", what, e.what()));
  }
  try {
    wire::Reader r(body.data(), body.size());
    switch (static_cast<wire::Status>(r.u8())) {
      case wire::Status::kOk:
        return body;
      case wire::Status::kTimeout: {
        std::vector<std::string> missing = r.strs();
        r.expect_end();
        KILN_DIST_FAIL(TimeoutError, "TcpStore {}: timed out after {} ms waiting for {} on the store server at {}",
                       what, reply_within.count(), describe_wait(waited_keys, missing), addr);
      }
      case wire::Status::kError: {
        std::string message = r.str();
        r.expect_end();
        fail("TcpStore {}: refused by the store server at {}: {}", what, addr, message);
      }
    }
    throw wire::Malformed(fmt::format("unknown reply status {}", body[0]));
  } catch (const wire::Malformed& e) {
    lose_connection_locked(fmt::format("malformed reply: {}", e.what()));
    fail("TcpStore {}: the store server at {} sent a malformed reply: {}", what, addr, e.what());
  }
}

void TcpStore::lose_connection_locked(const std::string& why) {
  // Part of a request or reply may be in flight, so the stream is out of step for good. No
  // reconnecting either: a new connection could reach a restarted server that holds none of
  // this job's keys, and failing at once beats waiting out a timeout on a server that is gone.
  sock_.reset();
  lost_ = why;
}

namespace {

// Parses the part of an OK reply after its status byte.
template <class F>
auto parse_ok(const std::vector<uint8_t>& body, const std::string& what, F&& f) {
  try {
    wire::Reader r(body.data() + 1, body.size() - 1);
    auto v = f(r);
    r.expect_end();
    return v;
  } catch (const wire::Malformed& e) {
    fail("TcpStore {}: malformed reply from the store server: {}", what, e.what());
  }
}

}  // namespace

void TcpStore::set(const std::string& key, const Bytes& value) {
  wire::Writer w;
  w.u8(static_cast<uint8_t>(wire::Op::kSet)).str(key).bytes(value.data(), value.size());
  const std::string what = fmt::format("set(\"{}\")", key);
  auto body = call(w, what, timeout_);
  parse_ok(body, what, [](wire::Reader&) { return 0; });
}

Bytes TcpStore::get(const std::string& key) {
  wire::Writer w;
  w.u8(static_cast<uint8_t>(wire::Op::kGet)).str(key).u64(static_cast<uint64_t>(timeout_.count()));
  const std::string what = fmt::format("get(\"{}\")", key);
  auto body = call(w, what, timeout_, {key});
  return parse_ok(body, what, [](wire::Reader& r) { return r.bytes(); });
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  wire::Writer w;
  w.u8(static_cast<uint8_t>(wire::Op::kAdd)).str(key).i64(delta);
  const std::string what = fmt::format("add(\"{}\", {})", key, delta);
  auto body = call(w, what, timeout_);
  return parse_ok(body, what, [](wire::Reader& r) { return r.i64(); });
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  wire::Writer w;
  w.u8(static_cast<uint8_t>(wire::Op::kCheck)).strs(keys);
  const std::string what = fmt::format("check([{}])", quoted_keys(keys));
  auto body = call(w, what, timeout_);
  return parse_ok(body, what, [](wire::Reader& r) { return r.u8() != 0; });
}

void TcpStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  timeout = std::max(timeout, Millis(0));
  wire::Writer w;
  w.u8(static_cast<uint8_t>(wire::Op::kWait)).strs(keys).u64(static_cast<uint64_t>(timeout.count()));
  const std::string what = fmt::format("wait([{}])", quoted_keys(keys));
  auto body = call(w, what, timeout, keys);
  parse_ok(body, what, [](wire::Reader&) { return 0; });
}

bool TcpStore::remove(const std::string& key) {
  wire::Writer w;
  w.u8(static_cast<uint8_t>(wire::Op::kDelete)).str(key);
  const std::string what = fmt::format("remove(\"{}\")", key);
  auto body = call(w, what, timeout_);
  return parse_ok(body, what, [](wire::Reader& r) { return r.u8() != 0; });
}

}  // namespace kiln::dist
