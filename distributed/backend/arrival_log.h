// Who got to which collective. Each rank publishes, through the store, the sequence number of
// the last collective it entered; when a collective fails or times out, the rank that saw it
// reads everyone's entry and names the ranks that never arrived. Publishing happens on a
// background thread (coalescing), so entering a collective costs an atomic store, not a
// round trip to the store. The same thread bumps a heartbeat counter every 0.5 s, so a rank
// that entered a collective and then died (a lost node) can be told from a slow one.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "distributed/store/store.h"

namespace kiln::dist {

class ArrivalLog {
 public:
  /// Rank 0 hosts the store; after a failure it lingers up to `linger` until every rank that
  /// reached the failed collective has read the store (else its exit would take the answers away).
  ArrivalLog(std::shared_ptr<Store> store, int rank, int size, Millis linger);
  ~ArrivalLog();
  ArrivalLog(const ArrivalLog&) = delete;
  ArrivalLog& operator=(const ArrivalLog&) = delete;

  /// This rank entered collective `seq` (1-based, increasing).
  void entered(uint64_t seq);
  /// Ranks whose latest published collective is before `seq`, after giving them `grace` to
  /// publish (a rank that is merely slow to publish is not blamed).
  std::vector<int> missing(uint64_t seq, Millis grace);
  /// Ranks (other than this one and `ignore`) whose heartbeat did not advance for a few beats:
  /// dead, or cut off from the store.
  std::vector<int> silent(const std::vector<int>& ignore);
  /// "allreduce #12 failed after 30.0 s on rank 0: ranks [2] did not arrive (rank 2 last
  /// entered #11); cause: <cause>", with "; ranks [2, 3] stopped responding (no heartbeat for
  /// 2.5 s)" added for ranks that died (a lost node's ranks may have entered it first).
  std::string describe_failure(const std::string& name, uint64_t seq, double seconds,
                               const std::string& cause);

 private:
  void publish_loop();
  int64_t published_seq(int rank);

  std::shared_ptr<Store> store_;
  int rank_, size_;
  Millis linger_;
  std::atomic<uint64_t> entered_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t published_ = 0;
  bool stop_ = false;
  bool urgent_ = false;  // a failure is being described: skip the rate limit
  std::thread publisher_;
};

}  // namespace kiln::dist
