// The Gloo backend: CPU tensors over TCP (CUDA tensors are staged through host memory); when
// every rank is on one host, all-reduce, broadcast, reduce-scatter and all-gather go through
// shared memory instead (shm_allreduce.h).
// Collectives run in issue order on one communication thread per group (the thread data
// parallel overlaps with backward); sends and receives are posted at once on the caller's thread
// and completed by the thread that waits on them (any number in flight), as torch's Gloo group
// does: a transfer costs no thread hand-off beyond Gloo's own I/O thread. Between two ranks of
// one host they go through a shared-memory channel instead (shm_p2p.h; KILN_SHM_P2P=0: TCP).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "distributed/backend/arrival_log.h"
#include "distributed/backend/hierarchical_allreduce.h"
#include "distributed/backend/process_group.h"
#include "distributed/backend/shm_allreduce.h"
#include "distributed/backend/shm_p2p.h"

namespace gloo {
class Context;
}

namespace kiln::dist {

struct GlooOptions {
  Millis timeout{std::chrono::seconds(300)};
  /// Address this rank listens on for its peers ("127.0.0.1" for a one-machine job).
  std::string hostname = "127.0.0.1";
  /// Or a network interface name (as GLOO_SOCKET_IFNAME); wins over hostname when set.
  std::string iface;
};

class ProcessGroupGloo final : public ProcessGroup {
 public:
  /// Connects a full mesh among `size` ranks through `store` (blocks until all have joined).
  ProcessGroupGloo(std::shared_ptr<Store> store, int rank, int size, GlooOptions options = {});
  ~ProcessGroupGloo() override;

  std::string backend() const override { return "gloo"; }
  /// Whether all-reduces go through shared memory (every rank on this host) or Gloo's TCP ring.
  bool uses_shared_memory() const { return shm_ != nullptr; }
  /// Whether all-reduces are hierarchical (hierarchical_allreduce.h): several nodes, several
  /// ranks on some.
  bool uses_hierarchy() const { return hier_ != nullptr; }
  /// How all-reduces travel, for a log line: "shared memory", "TCP ring", or "hierarchical
  /// (2 nodes x 2 ranks: shared memory within a node, TCP ring among node leaders)".
  std::string allreduce_path() const;
  /// How sends to and receives from `peer` travel: "shared memory" (same host) or "TCP".
  std::string p2p_path(int peer) const { return p2p_->connects(peer) ? "shared memory" : "TCP"; }
  WorkPtr allreduce(Tensor t, ReduceOp op) override;
  WorkPtr broadcast(Tensor t, int root) override;
  WorkPtr reduce(Tensor t, int root, ReduceOp op) override;
  WorkPtr allgather(std::vector<Tensor> outputs, Tensor input) override;
  WorkPtr reduce_scatter(Tensor output, std::vector<Tensor> inputs, ReduceOp op) override;
  /// In place when `output` is chunk rank() of `input` (contiguous, on the host): the other
  /// chunks are left holding partial results. Otherwise as ProcessGroup's.
  WorkPtr reduce_scatter_tensor(Tensor output, Tensor input, ReduceOp op) override;
  /// Straight into `output` when it is contiguous on the host; otherwise as ProcessGroup's.
  WorkPtr allgather_into_tensor(Tensor output, Tensor input) override;
  WorkPtr send(Tensor t, int dst, int tag) override;
  WorkPtr recv(Tensor t, int src, int tag) override;
  WorkPtr barrier() override;

 private:
  struct Task {
    WorkPtr work;
    std::function<void(const Task&)> run;
  };
  WorkPtr enqueue(const char* name, std::function<void(const Task&)> run);
  WorkPtr post_p2p(const char* op, Tensor t, int peer, int tag, bool is_send);
  void worker_loop();
  void fail_work(const Task& task, const std::exception& e);
  uint32_t tag(uint64_t seq) const { return static_cast<uint32_t>(seq); }
  /// In-place all-reduce of a contiguous host tensor (shared memory or Gloo's ring).
  void allreduce_host(const Tensor& h, ReduceOp op, uint64_t seq);
  /// Reduce-scatter of a contiguous host tensor of size() chunks, in place: returns chunk rank(),
  /// the result (shared memory on one host; else the ring of gloo_ring.h).
  Tensor reduce_scatter_host(const Tensor& all, ReduceOp op, uint64_t seq);
  /// All-gather of a contiguous host tensor into `all` (size() chunks shaped like it): shared
  /// memory on one host, else the ring of gloo_ring.h.
  void allgather_host(const Tensor& all, const Tensor& in, uint64_t seq);

  std::shared_ptr<Store> store_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<ArrivalLog> arrivals_;
  std::unique_ptr<ShmAllreduce> shm_;  // null unless all ranks share this node
  std::unique_ptr<HierarchicalAllreduce> hier_;
  std::shared_ptr<ShmP2P> p2p_;  // sends and receives to peers on this node (shared with their works)  // null unless several nodes, several ranks on some
  uint64_t next_seq_ = 0;      // collectives in issue order (the caller's thread)
  uint64_t next_p2p_seq_ = 0;  // sends and receives, numbered apart

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stop_ = false;  // the worker finishes what is queued, then exits
  std::thread worker_;
};

}  // namespace kiln::dist
