// Bounded polling and per-group store prefixes for the NCCL backend (distributed/nccl_progress.h);
// no NCCL or CUDA in it, so it builds and is tested everywhere.
#include "distributed/nccl_progress.h"

#include <atomic>
#include <thread>

#include <fmt/format.h>

namespace kiln::dist {

Progress poll_until_settled(const std::function<Progress()>& step, Millis timeout,
                            std::chrono::microseconds interval) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const Progress p = step();
    if (p != Progress::kPending) return p;
    if (std::chrono::steady_clock::now() >= deadline) return Progress::kPending;
    std::this_thread::sleep_for(interval);
  }
}

std::string next_nccl_group_prefix() {
  static std::atomic<uint64_t> groups{0};
  return fmt::format("nccl/{}", groups.fetch_add(1));
}

}  // namespace kiln::dist
