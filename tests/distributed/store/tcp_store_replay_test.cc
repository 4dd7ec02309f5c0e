// replay_tcp_store_server (the fuzzing entry of the TcpStore server): byte streams in, the
// server's exact replies out, with the semantics of the real server: parked GETs answered by
// another client's SET, timeouts at the end, protocol violations closing only their connection.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "distributed/store/tcp_store_protocol.h"
#include "distributed/store/tcp_store_server.h"

using namespace kiln::dist;
using wire::Op;
using wire::Status;

namespace {

std::vector<uint8_t> client(const std::vector<std::vector<uint8_t>>& frames) {
  std::vector<uint8_t> s = wire::hello();
  for (const auto& f : frames) s.insert(s.end(), f.begin(), f.end());
  return s;
}

std::vector<uint8_t> request(Op op, auto&&... fields) {
  wire::Writer w;
  w.u8(static_cast<uint8_t>(op));
  (fields(w), ...);
  return w.finish();
}

auto str(std::string s) {
  return [s](wire::Writer& w) { w.str(s); };
}
auto u64(uint64_t v) {
  return [v](wire::Writer& w) { w.u64(v); };
}

/// The reply frames after the server's hello, as bodies.
std::vector<std::vector<uint8_t>> frames(const std::vector<uint8_t>& r) {
  REQUIRE(r.size() >= wire::kHelloSize);
  CHECK(std::vector<uint8_t>(r.begin(), r.begin() + wire::kHelloSize) == wire::hello());
  std::vector<std::vector<uint8_t>> out;
  for (size_t at = wire::kHelloSize; at < r.size();) {
    const uint32_t len = wire::get_u32(&r[at]);
    out.emplace_back(r.begin() + at + 4, r.begin() + at + 4 + len);
    at += 4 + len;
  }
  return out;
}

}  // namespace

TEST_CASE("replay: SET then GET on one connection returns the value") {
  TcpStoreReplay r = replay_tcp_store_server(
      {client({request(Op::kSet, str("k"), str("value")), request(Op::kGet, str("k"), u64(1000))})});
  REQUIRE(r.replies.size() == 1);
  CHECK_FALSE(r.closed[0]);
  auto f = frames(r.replies[0]);
  REQUIRE(f.size() == 2);
  CHECK(f[0] == std::vector<uint8_t>{0});
  wire::Reader get(f[1].data(), f[1].size());
  CHECK(get.u8() == static_cast<uint8_t>(Status::kOk));
  CHECK(get.str() == "value");
}

TEST_CASE("replay: a GET parked on one connection is answered by another's SET") {
  TcpStoreReplay r = replay_tcp_store_server({client({request(Op::kGet, str("late"), u64(60000))}),
                                              client({request(Op::kSet, str("late"), str("here"))})});
  auto f = frames(r.replies[0]);
  REQUIRE(f.size() == 1);
  wire::Reader get(f[0].data(), f[0].size());
  CHECK(get.u8() == static_cast<uint8_t>(Status::kOk));
  CHECK(get.str() == "here");
}

TEST_CASE("replay: a key nobody sets times out, naming it") {
  TcpStoreReplay r = replay_tcp_store_server({client({request(Op::kGet, str("never"), u64(5))})});
  auto f = frames(r.replies[0]);
  REQUIRE(f.size() == 1);
  wire::Reader t(f[0].data(), f[0].size());
  CHECK(t.u8() == static_cast<uint8_t>(Status::kTimeout));
  CHECK(t.strs() == std::vector<std::string>{"never"});
}

TEST_CASE("replay: garbage closes its own connection only") {
  const std::vector<uint8_t> garbage = {'G', 'E', 'T', ' ', '/'};
  TcpStoreReplay r = replay_tcp_store_server({garbage, client({request(Op::kSet, str("a"), str("b"))})});
  CHECK(r.closed[0]);
  CHECK(r.replies[0].empty());
  CHECK_FALSE(r.closed[1]);
  CHECK(frames(r.replies[1]).size() == 1);
}
