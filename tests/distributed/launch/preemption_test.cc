// PreemptionGuard with real processes and real signals: the first SIGTERM only sets the flag, a
// second one exits at once with 128 + 15, and under a process group a signal that reached one rank
// stops every rank after the same step.
#include <signal.h>
#include <unistd.h>

#include "core/ops.h"
#include "distributed/backend/init.h"
#include "distributed/launch/preemption.h"
#include "tests/distributed/multiprocess.h"

using namespace kiln;

TEST_CASE("the first SIGTERM sets the flag; a second exits at once with status 143") {
  auto results = test::run_ranks(
      1,
      [](int, int) {
        dist::PreemptionGuard guard;
        test::expect(!dist::PreemptionGuard::requested(), "flag set before any signal");
        ::raise(SIGTERM);
        test::expect(dist::PreemptionGuard::requested(), "the first SIGTERM did not set the flag");
        test::expect(dist::PreemptionGuard::signal() == SIGTERM, "signal() is {}", dist::PreemptionGuard::signal());
        test::expect(guard.should_stop(nullptr), "should_stop without a group ignores the flag");
        ::raise(SIGTERM);  // the second: _exit(143)
        throw Error("still running after the second SIGTERM");
      },
      60, "preempt_twice");
  REQUIRE(results.size() == 1);
  INFO(results[0].stderr_text);
  CHECK(results[0].exit_code == 143);
  CHECK(test::contains(results[0].stderr_text, "stop signal received: finishing the current step"));
}

TEST_CASE("a signal that reaches one rank stops all ranks after the same step") {
  auto results = test::run_ranks(
      3,
      [](int rank, int) {
        auto pg = dist::init_process_group();
        dist::PreemptionGuard guard;
        int64_t stopped_at = -1;
        for (int64_t step = 1; step <= 20; ++step) {
          if (rank == 2 && step == 7) ::raise(SIGTERM);  // only rank 2 is signalled, mid-step 7
          if (guard.should_stop(pg.get())) {
            stopped_at = step;
            break;
          }
        }
        test::expect(stopped_at == 7, "rank {} stopped at step {} (want 7, with rank 2)", rank, stopped_at);
        test::expect(dist::PreemptionGuard::requested() == (rank == 2), "rank {}'s own flag is wrong", rank);
      },
      120, "preempt_agree");
  test::require_all_ok(results);
}
