// Running a multi-rank benchmark's body: under //distributed/launch (WORLD_SIZE set) this
// process is one rank and runs it once; otherwise it forks `nproc` local ranks on 127.0.0.1
// (dist::run_local_ranks) and reports the ranks that failed. leads_job() names the one process
// that checks the host (bench/host_check.h) before the ranks start.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>

#include "distributed/backend/init.h"
#include "distributed/launch/local_ranks.h"

namespace kiln::bench {

/// True in the process that checks the host and prints its lines: the one that forks the local
/// ranks, or rank 0 of a job started by a launcher (or srun, mpirun).
inline bool leads_job() {
  if (!dist::launched_with_world()) return true;
  const char* rank = std::getenv("RANK");
  return rank == nullptr || std::atoi(rank) == 0;
}

/// The exit status for main(): 0 when every rank finished, 1 (naming the ranks) otherwise.
inline int run_on_ranks(int nproc, const std::function<void()>& body, const char* name, double timeout_s = 1200) {
  if (dist::launched_with_world()) {
    body();
    return 0;
  }
  auto results = dist::run_local_ranks(nproc, [&](int, int) { body(); }, {.timeout_s = timeout_s});
  int status = 0;
  for (size_t r = 0; r < results.size(); ++r)
    if (results[r].exit_code != 0) {
      std::fprintf(stderr, "%s: rank %zu failed\n", name, r);
      status = 1;
    }
  return status;
}

}  // namespace kiln::bench
