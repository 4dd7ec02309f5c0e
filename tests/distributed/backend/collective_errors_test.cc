// Collectives (all-reduce, and ZeRO-1's all-gather and reduce-scatter) fail with typed errors
// callers can tell apart, with real processes on 127.0.0.1:
// a peer that never arrives gives dist::TimeoutError, a peer that died gives dist::PeerError,
// over shared memory and over Gloo's TCP transport alike; both are kiln::Errors. The scenarios of
// each case run at once (test::run_concurrently): they wait, they do not compute.
#include <doctest/doctest.h>
#include <signal.h>

#include <tuple>

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

/// One rank's part: allreduce #1 together, then rank 1 dies (kill_peer) or stays away, alive
/// until rank 0 has given up (its GaveUp marker in `marks`), while rank 0 runs collective #2,
/// `op` (allreduce, or ZeRO-1's flat allgather or reduce_scatter), and checks the kind of error
/// it gets.
void absent_peer_rank(int rank, bool shm, bool kill_peer, const std::string& op, const std::string& marks) {
  setenv("KILN_SHM_ALLREDUCE", shm ? "1" : "0", 1);
  dist::InitOptions o;
  o.timeout = std::chrono::seconds(kill_peer ? 20 : 2);
  auto pg = dist::init_process_group(o);
  Tensor t = ones({1000});
  pg->allreduce(t)->wait();  // #1: everyone
  if (rank == 1) {
    if (kill_peer) raise(SIGKILL);
    // Stuck elsewhere, alive, until rank 0 is done (not a fixed sleep past its timeout).
    expect(test::wait_for_gave_up(marks, {0}), "rank 1: rank 0 never gave up on {} #2", op);
    return;
  }
  test::GaveUp gave_up(marks, rank);
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

/// One scenario as a 2-rank job: "" when rank 0 got the right error (and rank 1 died, or stayed
/// alive until rank 0 gave up), else what went wrong with both ranks' stderr. Runs in a child of
/// run_concurrently, so it reports instead of CHECKing.
std::string absent_peer_scenario(bool shm, bool kill_peer, const std::string& op) {
  const std::string name = fmt::format("{}_{}_{}", op, shm ? "shm" : "tcp", kill_peer ? "dead" : "away");
  const std::string marks = test::scratch_dir(name + "_gave_up");
  const auto start = std::chrono::steady_clock::now();
  auto results = test::run_ranks(
      2, [shm, kill_peer, op, marks](int rank, int) { absent_peer_rank(rank, shm, kill_peer, op, marks); }, 90, name);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::string problems;
  if (results[0].exit_code != 0) problems += fmt::format("rank 0 exited {}; ", results[0].exit_code);
  if (kill_peer && results[1].signal != SIGKILL) problems += "rank 1 was not killed; ";
  if (!kill_peer && results[1].exit_code != 0)  // it stayed alive and saw rank 0 give up
    problems += fmt::format("rank 1 exited {}; ", results[1].exit_code);
  if (kill_peer && took >= 20) problems += fmt::format("took {:.1f} s, not well before the 20 s timeout; ", took);
  if (problems.empty()) return "";
  return fmt::format("{}: {}\nrank 0 stderr:\n{}\nrank 1 stderr:\n{}", name, problems, results[0].stderr_text,
                     results[1].stderr_text);
}

/// The scenarios {shm, kill_peer, op} all at once: each waits seconds on a timeout or on the
/// failure report's grace periods (a dead peer is named after 3 s of silence), computing nothing.
void check_scenarios(const std::vector<std::tuple<bool, bool, std::string>>& scenarios, const std::string& name) {
  std::vector<std::function<std::string()>> jobs;
  for (const auto& [shm, kill_peer, op] : scenarios)
    jobs.push_back([shm, kill_peer, op] { return absent_peer_scenario(shm, kill_peer, op); });
  for (const std::string& report : test::run_concurrently(jobs, name)) CHECK_MESSAGE(report.empty(), report);
}

TEST_CASE("a peer that never arrives is a dist::TimeoutError (shared memory and TCP)") {
  check_scenarios({{true, false, "allreduce"}, {false, false, "allreduce"}}, "timeout");
}

TEST_CASE("a peer that died is a dist::PeerError, well before the timeout (shared memory and TCP)") {
  check_scenarios({{true, true, "allreduce"}, {false, true, "allreduce"}}, "dead");
}

TEST_CASE("ZeRO-1's all-gather and reduce-scatter fail the same way (shared memory and TCP)") {
  std::vector<std::tuple<bool, bool, std::string>> scenarios;
  for (const std::string op : {"allgather", "reduce_scatter"})
    for (bool shm : {true, false})
      for (bool kill_peer : {false, true}) scenarios.emplace_back(shm, kill_peer, op);
  check_scenarios(scenarios, "zero");
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
