// Hostile and broken traffic to a TcpStore server: each bad connection is closed on its own and
// the server goes on answering everyone else correctly.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "distributed/store/rendezvous.h"
#include "distributed/store/socket_util.h"
#include "distributed/store/tcp_store.h"
#include "distributed/store/tcp_store_protocol.h"
#include "tests/distributed/store/proc_util.h"

using namespace kiln::dist;
using namespace kiln::test;
using namespace std::chrono_literals;

namespace {

Fd raw_connect(int port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  REQUIRE(fd.valid());
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  return fd;
}

void send_bytes(int fd, const std::vector<uint8_t>& b) {
  REQUIRE(::send(fd, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size()));
}

// Reads until the server closes the connection; returns what it sent, or fails after `timeout`.
std::vector<uint8_t> read_until_closed(int fd, std::chrono::milliseconds timeout = 60s) {
  std::vector<uint8_t> got;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0) {
      FAIL("the server kept a bad connection open");
      return got;
    }
    uint8_t buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return got;  // closed (0) or reset
    got.insert(got.end(), buf, buf + n);
  }
}

std::vector<uint8_t> hello_with(uint32_t version) {
  std::vector<uint8_t> h = wire::hello();
  wire::put_u32(h.data() + 4, version);
  return h;
}

std::vector<uint8_t> concat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A fresh client can still set, get and add.
void check_serving(int port, const std::string& tag) {
  TcpStore c("127.0.0.1", port, 0, false, 60s);
  c.set("probe/" + tag, tag);
  CHECK(c.get_string("probe/" + tag) == tag);
  CHECK(c.add("probe/count", 1) >= 1);
}

}  // namespace

TEST_CASE("garbage, wrong hellos and oversized lengths close only the offending connection") {
  TcpStore store("127.0.0.1", 0, 0, true, 60s);
  const int port = store.port();
  store.set("kept", std::string("yes"));

  SUBCASE("random bytes") {
    std::mt19937 rng(1234);
    std::vector<uint8_t> junk(4096);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    junk[0] = 'X';
    Fd fd = raw_connect(port);
    send_bytes(fd.get(), junk);
    CHECK(read_until_closed(fd.get()).empty());
  }
  SUBCASE("wrong magic") {
    Fd fd = raw_connect(port);
    send_bytes(fd.get(), {'K', 'I', 'L', 'X', 1, 0, 0, 0});
    CHECK(read_until_closed(fd.get()).empty());
  }
  SUBCASE("an HTTP request") {
    Fd fd = raw_connect(port);
    std::string req = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    send_bytes(fd.get(), std::vector<uint8_t>(req.begin(), req.end()));
    CHECK(read_until_closed(fd.get()).empty());
  }
  SUBCASE("another protocol version gets the server's hello, then a close") {
    Fd fd = raw_connect(port);
    send_bytes(fd.get(), hello_with(99));
    CHECK(read_until_closed(fd.get()) == wire::hello());
  }
  SUBCASE("a length prefix of 4 GiB") {
    Fd fd = raw_connect(port);
    send_bytes(fd.get(), concat(wire::hello(), {0xff, 0xff, 0xff, 0xff, 1, 2, 3}));
    CHECK(read_until_closed(fd.get()) == wire::hello());
  }
  SUBCASE("a length prefix just over the limit") {
    Fd fd = raw_connect(port);
    std::vector<uint8_t> len(4);
    wire::put_u32(len.data(), wire::kMaxFrame + 1);
    send_bytes(fd.get(), concat(wire::hello(), len));
    CHECK(read_until_closed(fd.get()) == wire::hello());
  }
  SUBCASE("a zero-length message") {
    Fd fd = raw_connect(port);
    send_bytes(fd.get(), concat(wire::hello(), {0, 0, 0, 0}));
    CHECK(read_until_closed(fd.get()) == wire::hello());
  }
  SUBCASE("an unknown op") {
    wire::Writer w;
    w.u8(99).str("k");
    Fd fd = raw_connect(port);
    send_bytes(fd.get(), concat(wire::hello(), w.finish()));
    CHECK(read_until_closed(fd.get()) == wire::hello());
  }
  SUBCASE("a key length pointing past the message") {
    wire::Writer w;
    w.u8(static_cast<uint8_t>(wire::Op::kSet)).u32(1000).u8('k');
    Fd fd = raw_connect(port);
    send_bytes(fd.get(), concat(wire::hello(), w.finish()));
    CHECK(read_until_closed(fd.get()) == wire::hello());
  }
  SUBCASE("a WAIT claiming two billion keys") {
    wire::Writer w;
    w.u8(static_cast<uint8_t>(wire::Op::kWait)).u32(2000000000u).u64(10);
    Fd fd = raw_connect(port);
    send_bytes(fd.get(), concat(wire::hello(), w.finish()));
    CHECK(read_until_closed(fd.get()) == wire::hello());
  }
  SUBCASE("trailing bytes after a valid request") {
    wire::Writer w;
    w.u8(static_cast<uint8_t>(wire::Op::kDelete)).str("k").u8(0);
    Fd fd = raw_connect(port);
    send_bytes(fd.get(), concat(wire::hello(), w.finish()));
    CHECK(read_until_closed(fd.get()) == wire::hello());
  }
  SUBCASE("half a hello, then hang-up") {
    Fd fd = raw_connect(port);
    send_bytes(fd.get(), {'K', 'I', 'L'});
  }
  SUBCASE("half a message, then hang-up") {
    wire::Writer w;
    w.u8(static_cast<uint8_t>(wire::Op::kSet)).str("half").str("value that never arrives");
    std::vector<uint8_t> frame = w.finish();
    frame.resize(frame.size() / 2);
    Fd fd = raw_connect(port);
    send_bytes(fd.get(), concat(wire::hello(), frame));
  }
  SUBCASE("a client parked in GET hangs up") {
    wire::Writer w;
    w.u8(static_cast<uint8_t>(wire::Op::kGet)).str("parked").u64(60000);
    Fd fd = raw_connect(port);
    send_bytes(fd.get(), concat(wire::hello(), w.finish()));
    std::this_thread::sleep_for(50ms);
    fd.reset();
    store.set("parked", std::string("now"));  // answering it must not break the server
  }
  SUBCASE("a stalled half message does not block other clients") {
    wire::Writer w;
    w.u8(static_cast<uint8_t>(wire::Op::kSet)).str("stalled").str("xxxxxxxxxxxxxxxx");
    std::vector<uint8_t> frame = w.finish();
    frame.resize(10);
    Fd fd = raw_connect(port);
    send_bytes(fd.get(), concat(wire::hello(), frame));
    check_serving(port, "while-stalled");
    CHECK_FALSE(store.check({"stalled"}));
  }
  SUBCASE("many idle connections") {
    std::vector<Fd> idle;
    for (int i = 0; i < 100; ++i) idle.push_back(raw_connect(port));
    check_serving(port, "many-idle");
  }

  check_serving(port, "after");
  CHECK(store.get_string("kept") == "yes");
}

TEST_CASE("pipelined requests on one connection are answered in order") {
  TcpStore store("127.0.0.1", 0, 0, true, 60s);
  wire::Writer get, add;
  get.u8(static_cast<uint8_t>(wire::Op::kGet)).str("p").u64(60000);
  add.u8(static_cast<uint8_t>(wire::Op::kAdd)).str("n").i64(5);
  Fd fd = raw_connect(store.port());
  // The GET parks until another connection sets the key; the ADD queued behind it on the same
  // connection must wait its turn, so that replies come back in request order.
  send_bytes(fd.get(), concat(concat(wire::hello(), get.finish()), add.finish()));
  std::this_thread::sleep_for(50ms);
  CHECK_FALSE(store.check({"n"}));  // the ADD is queued behind the parked GET
  store.set("p", std::string("pv"));
  // Expected replies: hello, GET -> OK "pv", ADD -> OK 5.
  wire::Writer r1, r2;
  r1.u8(0).str("pv");
  r2.u8(0).i64(5);
  std::vector<uint8_t> expected = concat(concat(wire::hello(), r1.finish()), r2.finish());
  std::vector<uint8_t> got(expected.size());
  REQUIRE(recv_exact(fd.get(), got.data(), got.size(), deadline_after(60s), "test"));
  CHECK(got == expected);
  CHECK(store.get_string("n") == "5");
}

TEST_CASE("a client refuses a server that is not a TcpStore") {
  Fd listener = listen_tcp(0, 4);
  const int port = local_port(listener.get());
  std::thread fake([&] {
    pollfd p{listener.get(), POLLIN, 0};
    ::poll(&p, 1, 60000);
    Fd c(::accept(listener.get(), nullptr, nullptr));
    const char reply[] = "SSH-2.0-OpenSSH\r\n";
    ::send(c.get(), reply, sizeof reply - 1, MSG_NOSIGNAL);
    std::this_thread::sleep_for(200ms);
  });
  std::string msg = error_of([&] { TcpStore("127.0.0.1", port, 0, false, 30s); });
  fake.join();
  CHECK(contains(msg, "127.0.0.1:" + std::to_string(port)));
  CHECK(contains(msg, "Kiln TcpStore"));
}
