// Bounded polling, the typed error of a failed call and per-group store prefixes for the NCCL
// backend (distributed/backend/nccl_progress.h); no NCCL or CUDA in it, so it builds and is tested
// everywhere.
#include "distributed/backend/nccl_progress.h"

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

NcclFailure classify_nccl_failure(Progress p, int result) {
  KILN_ASSERT(p != Progress::kDone && (p == Progress::kPending || result != kNcclSuccess),
              "classify_nccl_failure: a call that succeeded (progress {}, result {})", static_cast<int>(p), result);
  if (p == Progress::kPending) return NcclFailure::kTimeout;
  return result == kNcclRemoteError ? NcclFailure::kPeer : NcclFailure::kOther;
}

void throw_nccl_failure(NcclFailure kind, std::string message) {
  switch (kind) {
    case NcclFailure::kTimeout: throw TimeoutError(std::move(message));
    case NcclFailure::kPeer: throw PeerError(std::move(message));
    case NcclFailure::kOther: break;
  }
  throw Error(std::move(message));
}

std::string next_nccl_group_prefix() {
  static std::atomic<uint64_t> groups{0};
  return fmt::format("nccl/{}", groups.fetch_add(1));
}

}  // namespace kiln::dist
