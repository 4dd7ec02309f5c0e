// A rank started by a scheduler (srun, mpirun) or by hand with its variables: joins through
// init_process_group() with no arguments, all-reduces rank + 1, and prints what it found, so a
// script can check that the job formed from the scheduler's environment alone.
#include <cstdio>
#include <cstdlib>

#include "core/ops.h"
#include "distributed/backend/init.h"

int main() {
  using namespace kiln;
  try {
    auto pg = dist::init_process_group();
    Tensor t = full({1}, static_cast<double>(pg->rank() + 1));
    pg->allreduce(t, dist::ReduceOp::kSum)->wait();
    const int n = pg->size();
    const double want = n * (n + 1) / 2.0;
    if (t.item<float>() != want) {
      std::fprintf(stderr, "env_worker: rank %d: allreduce gave %g, expected %g\n", pg->rank(), t.item<float>(), want);
      return 1;
    }
    const char* local = std::getenv("LOCAL_RANK");
    std::printf("rank %d of %d local %s master %s:%s sum %g\n", pg->rank(), n, local ? local : "unset",
                std::getenv("MASTER_ADDR"), std::getenv("MASTER_PORT"), want);
    pg->barrier()->wait();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "env_worker: %s\n", e.what());
    return 1;
  }
}
