// TcpStore across real processes on 127.0.0.1: the server runs in this test process, the
// clients in store_worker processes.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "distributed/store/errors.h"
#include "distributed/store/rendezvous.h"
#include "distributed/store/tcp_store.h"
#include "tests/distributed/store/proc_util.h"
#include "tests/distributed/store/store_scenarios.h"

using namespace kiln::dist;
using namespace kiln::test;
using namespace std::chrono_literals;

namespace {

std::string spec(const TcpStore& s) { return "tcp:127.0.0.1:" + std::to_string(s.port()); }

TcpStore server(Millis timeout = Millis(120000)) { return TcpStore("127.0.0.1", 0, 0, true, timeout); }

}  // namespace

TEST_CASE("three processes exchange values through the server") {
  TcpStore store("127.0.0.1", 0, 4, true);
  REQUIRE(store.port() > 0);
  check_three_exchange(store, spec(store), "exchange");
}

TEST_CASE("clients started before the server connect once it is up") {
  const int port = free_tcp_port();
  std::vector<Proc> procs;
  for (int r = 0; r < 2; ++r)
    procs.push_back(spawn("early", {worker_path(), "exchange", "tcp:127.0.0.1:" + std::to_string(port),
                                    std::to_string(r), "2"}));
  ProcGuard guard;
  for (auto& p : procs) guard.procs.push_back(&p);
  // Give them time to find nothing listening and retry.
  for (auto& p : procs) CHECK_FALSE(wait_for(p, 300ms));
  TcpStore store("127.0.0.1", port, 3, true);
  for (auto& p : procs) {
    finish(p);
    CHECK_MESSAGE(p.exited_ok(), p.err());
  }
  CHECK(store.get_string("joined") == "2");
}

TEST_CASE("adds from three processes are atomic") {
  TcpStore store = server();
  check_atomic_adds(store, spec(store), "add");
}

TEST_CASE("get before set blocks, then returns the value") {
  TcpStore store = server();
  check_get_waits_for_set(store, spec(store), "get");
}

TEST_CASE("wait and get time out with a message naming the keys, the timeout and the server") {
  TcpStore store = server();
  store.set("a", std::string("1"));
  auto t0 = std::chrono::steady_clock::now();
  std::string msg = error_of([&] { store.wait({"a", "nope"}, 300ms); });
  auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(contains(msg, "nope"));
  CHECK(contains(msg, "300 ms"));
  CHECK(contains(msg, "still missing: \"nope\""));
  CHECK(contains(msg, "127.0.0.1:" + std::to_string(store.port())));
  CHECK(waited >= 290ms);
  CHECK(waited < 30s);
  CHECK_THROWS_AS(store.wait({"nope"}, 50ms), TimeoutError);
  CHECK(contains(msg, "[distributed/store/tcp_store.cc:"));  // where it was thrown

  store.set_timeout(200ms);
  msg = error_of([&] { store.get("never"); });
  CHECK(contains(msg, "get(\"never\")"));
  CHECK(contains(msg, "200 ms"));
  // The connection is still in step after the timeouts.
  store.set_timeout(120s);
  CHECK(store.get_string("a") == "1");
}

TEST_CASE("check and remove") {
  TcpStore store = server();
  TcpStore other("127.0.0.1", store.port(), 0, false);
  CHECK_FALSE(store.check({"k"}));
  other.set("k", std::string("v"));
  CHECK(store.check({"k"}));
  CHECK_FALSE(store.check({"k", "k2"}));
  CHECK(store.remove("k"));
  CHECK_FALSE(other.check({"k"}));
  CHECK_FALSE(other.remove("k"));
  other.set_timeout(100ms);
  CHECK(contains(error_of([&] { other.get("k"); }), "timed out"));
}

TEST_CASE("add keeps decimal text and refuses a non-integer value") {
  TcpStore store = server();
  CHECK(store.add("n", 5) == 5);
  CHECK(store.add("n", -7) == -2);
  CHECK(store.get_string("n") == "-2");
  store.set("text", std::string("abc"));
  std::string msg = error_of([&] { store.add("text", 1); });
  CHECK(contains(msg, "\"text\""));
  CHECK(contains(msg, "not a decimal integer"));
  CHECK(store.add("n", 2) == 0);  // still serving
}

TEST_CASE("binary values and empty values round-trip") {
  TcpStore store = server();
  Bytes bin(100000);
  for (size_t i = 0; i < bin.size(); ++i) bin[i] = static_cast<uint8_t>(i * 7 + 3);
  store.set("bin", bin);
  CHECK(store.get("bin") == bin);
  store.set("empty", Bytes{});
  CHECK(store.get("empty").empty());
  CHECK(store.check({"empty"}));
}

TEST_CASE("one client shared by threads") {
  TcpStore store = server();
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        if (store.add("shared", 1) <= 0) ++bad;
    });
  for (auto& t : threads) t.join();
  CHECK(bad == 0);
  CHECK(store.add("shared", 0) == 800);
}

TEST_CASE("stopping the server fails a parked client instead of hanging it") {
  Proc p;
  ProcGuard guard{{&p}};
  {
    TcpStore store = server();
    p = spawn("parked", {worker_path(), "get", spec(store), "never-set"});
    REQUIRE(wait_for_output(p, "connected", 120s));
  }
  // Well within the worker's 120 s store timeout.
  finish(p, 60s);
  CHECK(WIFEXITED(p.status));
  CHECK(WEXITSTATUS(p.status) == 2);
  CHECK(contains(p.err(), "store server at 127.0.0.1:"));
}

TEST_CASE("after losing the server, a client fails at once instead of waiting out its timeout") {
  auto srv = std::make_unique<TcpStore>("127.0.0.1", 0, 0, true);
  TcpStore client("127.0.0.1", srv->port(), 0, false, 120s);
  client.set("k", std::string("v"));
  srv.reset();
  // "closed the connection" or "Connection reset by peer", depending on timing.
  CHECK(contains(error_of([&] { client.get("k"); }), "store server at 127.0.0.1:"));
  CHECK_THROWS_AS(client.get("k"), PeerError);
  auto t0 = std::chrono::steady_clock::now();
  std::string msg = error_of([&] { client.set("k", std::string("w")); });
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK(contains(msg, "was lost earlier"));
  CHECK(contains(msg, "127.0.0.1:"));
}

TEST_CASE("PrefixStore namespaces keys") {
  auto base = std::make_shared<TcpStore>("127.0.0.1", 0, 0, true);
  PrefixStore pg("pg0", base);
  pg.set("k", std::string("v"));
  CHECK(base->check({"pg0/k"}));
  CHECK_FALSE(base->check({"k"}));
  CHECK(pg.get_string("k") == "v");
  CHECK(pg.add("n", 2) == 2);
  CHECK(base->get_string("pg0/n") == "2");
  CHECK(pg.check({"k", "n"}));
  std::string msg = error_of([&] { pg.wait({"missing"}, 100ms); });
  CHECK(contains(msg, "pg0/missing"));
  CHECK(pg.remove("k"));
  CHECK_FALSE(base->check({"pg0/k"}));
}

TEST_CASE("constructor errors name the address") {
  CHECK(contains(error_of([] { TcpStore("127.0.0.1", 70000, 0, false); }), "70000"));
  CHECK(contains(error_of([] { TcpStore("127.0.0.1", 0, 0, false); }), "port 0"));
  const int port = free_tcp_port();
  std::string msg = error_of([&] { TcpStore("127.0.0.1", port, 0, false, 200ms); });
  CHECK(contains(msg, "127.0.0.1:" + std::to_string(port)));
  CHECK(contains(msg, "200 ms"));
  CHECK(contains(msg, "refused"));
  CHECK(contains(error_of([] { TcpStore("no-such-host.invalid", 1234, 0, false, 200ms); }), "no-such-host.invalid"));
  TcpStore first = server();
  CHECK(contains(error_of([&] { TcpStore("127.0.0.1", first.port(), 0, true); }),
                 "cannot bind port " + std::to_string(first.port())));
}
