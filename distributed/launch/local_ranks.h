// Runs a function as `n` real processes on this machine (fork), each with the environment
// //distributed/launch would give it (RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free
// MASTER_PORT, ...), so `init_process_group()` just works inside. For tests and benchmarks that
// want several ranks from one binary. The caller should not have started threads of its own
// (fork copies only the calling thread).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace kiln::dist {

struct LocalRankResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string stderr_text;  // what the rank wrote to stderr (when captured)
};

struct LocalRanksOptions {
  double timeout_s = 120;  // ranks still running after this are killed
  /// Directory for each rank's stderr ("" = leave stderr alone).
  std::string capture_dir;
  /// Each rank's compute threads (set_num_threads, and KILN_NUM_THREADS for what it starts);
  /// 0 keeps the parent's setting.
  int threads_per_rank = 1;
};

/// Forks `n` ranks running body(rank, n); a rank exits 0 when body returns, 1 (message on
/// stderr) when it throws. Returns every rank's exit.
std::vector<LocalRankResult> run_local_ranks(int n, const std::function<void(int, int)>& body,
                                             const LocalRanksOptions& options = {});

}  // namespace kiln::dist
