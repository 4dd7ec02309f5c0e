// A rank for flight_recorder_launch_test.sh: both ranks all-reduce once; then rank 1 writes its
// flight recorder and fails, while rank 0 waits in all-reduce #2 until the launcher stops it.
#include <cstdio>

#include "core/ops.h"
#include "distributed/backend/init.h"
#include "distributed/debug/traced_process_group.h"

int main() {
  using namespace kiln;
  dist::InitOptions o;
  o.timeout = std::chrono::seconds(120);
  auto pg = dist::trace_process_group(dist::init_process_group(o));
  Tensor t = ones({64});
  pg->allreduce(t)->wait();
  if (pg->rank() == 1) {
    std::fprintf(stderr, "worker: rank 1 fails after collective #1 (dump %s)\n", pg->dump_flight_recorder().c_str());
    return 3;
  }
  std::fprintf(stderr, "worker: rank 0 enters collective #2\n");
  pg->allreduce(t)->wait();  // never completes: the launcher stops this rank
  return 0;
}
