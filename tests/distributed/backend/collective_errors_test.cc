// Collectives (all-reduce, and ZeRO-1's all-gather and reduce-scatter) fail with typed errors
// callers can tell apart, with real processes on 127.0.0.1:
// a peer that never arrives gives dist::TimeoutError, a peer that died gives dist::PeerError,
// over shared memory and over Gloo's TCP transport alike; both are kiln::Errors.
#include <doctest/doctest.h>
#include <signal.h>

#include <thread>

#include "core/ops.h"
#include "distributed/store/errors.h"
#include "distributed/backend/init.h"
#include "tests/distributed/multiprocess.h"

namespace kiln {
namespace {

using test::expect;

/// The collective, the absent rank, and the file:line the cause was thrown from (Kiln's shared
/// memory path, or Gloo's own sources).
void expect_described(const std::string& msg, const std::string& op) {
  expect(msg.find(op + " #2 failed") != std::string::npos, "message: {}", msg);
  expect(msg.find("ranks [1] did not arrive") != std::string::npos, "message: {}", msg);
  expect(msg.find(".cc:") != std::string::npos, "no file:line in: {}", msg);
}

/// One rank's part: allreduce #1 together, then rank 1 dies (kill_peer) or stays away, alive,
/// while rank 0 runs collective #2, `op` (allreduce, or ZeRO-1's flat allgather or
/// reduce_scatter), and checks the kind of error it gets.
void absent_peer_rank(int rank, bool shm, bool kill_peer, const std::string& op) {
  setenv("KILN_SHM_ALLREDUCE", shm ? "1" : "0", 1);
  dist::InitOptions o;
  o.timeout = std::chrono::seconds(kill_peer ? 20 : 2);
  auto pg = dist::init_process_group(o);
  Tensor t = ones({1000});
  pg->allreduce(t)->wait();  // #1: everyone
  if (rank == 1) {
    if (kill_peer) raise(SIGKILL);
    std::this_thread::sleep_for(std::chrono::seconds(6));  // stuck elsewhere, alive
    return;
  }
  std::string kind = "nothing";
  try {  // #2: rank 1 never comes
    if (op == "allreduce") {
      pg->allreduce(t)->wait();
    } else if (op == "allgather") {
      pg->allgather_into_tensor(zeros({2000}), t)->wait();
    } else {
      Tensor flat = ones({2000});
      pg->reduce_scatter_tensor(flat.narrow(0, 0, 1000), flat)->wait();
    }
  } catch (const dist::TimeoutError& e) {
    kind = "TimeoutError";
    expect_described(e.what(), op);
  } catch (const dist::PeerError& e) {
    kind = "PeerError";
    expect_described(e.what(), op);
  } catch (const Error& e) {
    kind = fmt::format("a plain kiln::Error ({})", e.what());
  }
  const char* want = kill_peer ? "PeerError" : "TimeoutError";
  expect(kind == want, "shm={}: {} #2 threw {}, expected {}", shm, op, kind, want);
}

void run_with_absent_peer(bool shm, bool kill_peer, const std::string& name, const std::string& op = "allreduce") {
  auto results = test::run_ranks(
      2, [shm, kill_peer, op](int rank, int) { absent_peer_rank(rank, shm, kill_peer, op); }, 90, name);
  INFO("rank 0 stderr:\n" << results[0].stderr_text);
  CHECK(results[0].exit_code == 0);
  if (kill_peer) CHECK(results[1].signal == SIGKILL);
}

TEST_CASE("a peer that never arrives is a dist::TimeoutError (shared memory and TCP)") {
  for (bool shm : {true, false}) {
    CAPTURE(shm);
    run_with_absent_peer(shm, /*kill_peer=*/false, shm ? "timeout_shm" : "timeout_tcp");
  }
}

TEST_CASE("a peer that died is a dist::PeerError, well before the timeout (shared memory and TCP)") {
  for (bool shm : {true, false}) {
    CAPTURE(shm);
    auto start = std::chrono::steady_clock::now();
    run_with_absent_peer(shm, /*kill_peer=*/true, shm ? "dead_shm" : "dead_tcp");
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
  }
}

TEST_CASE("ZeRO-1's all-gather and reduce-scatter fail the same way (shared memory and TCP)") {
  for (const std::string op : {"allgather", "reduce_scatter"})
    for (bool shm : {true, false})
      for (bool kill_peer : {false, true}) {
        CAPTURE(op);
        CAPTURE(shm);
        CAPTURE(kill_peer);
        const std::string name = fmt::format("{}_{}_{}", op, shm ? "shm" : "tcp", kill_peer ? "dead" : "away");
        run_with_absent_peer(shm, kill_peer, name, op);
      }
}

TEST_CASE("the error types derive from kiln::Error, so existing catch sites keep working") {
  CHECK_THROWS_AS(throw dist::TimeoutError("t"), Error);
  CHECK_THROWS_AS(throw dist::PeerError("p"), Error);
  CHECK_THROWS_AS(dist::rethrow_as(dist::TimeoutError("t"), "with context"), dist::TimeoutError);
  CHECK_THROWS_AS(dist::rethrow_as(dist::PeerError("p"), "with context"), dist::PeerError);
  CHECK_THROWS_AS(dist::rethrow_as(std::runtime_error("x"), "with context"), Error);
}

}  // namespace
}  // namespace kiln
