// The NCCL backend: CUDA tensors, one non-blocking communicator per group (its unique id shared
// through the store by rank 0 under the group's own prefix; set-up fails after the timeout when a
// peer never joins), collectives on the group's own stream. A collective waits (on the device)
// for the work the caller queued on its current stream; `Work::wait()` makes the caller's
// current stream wait for the collective, without blocking the host, and fails the collective
// (aborting the communicator) once it has run longer than the timeout. allreduce, broadcast,
// reduce, allgather, send and recv also take host tensors (the small metadata that DDP, the pipeline and the
// trainers exchange as CPU tensors, as on Gloo): they go through a device copy, and wait()
// copies the result back. Linking
// //distributed/backend:nccl registers the backend as "nccl" for init_process_group.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "distributed/backend/arrival_log.h"
#include "distributed/backend/process_group.h"

namespace kiln::dist {

class ProcessGroupNCCL final : public ProcessGroup {
 public:
  /// Joins on cuda:LOCAL_RANK (the current device when LOCAL_RANK is unset), and makes it current.
  ProcessGroupNCCL(std::shared_ptr<Store> store, int rank, int size, Millis timeout);
  ~ProcessGroupNCCL() override;

  std::string backend() const override { return "nccl"; }
  WorkPtr allreduce(Tensor t, ReduceOp op) override;
  WorkPtr broadcast(Tensor t, int root) override;
  WorkPtr reduce(Tensor t, int root, ReduceOp op) override;
  WorkPtr allgather(std::vector<Tensor> outputs, Tensor input) override;
  WorkPtr reduce_scatter(Tensor output, std::vector<Tensor> inputs, ReduceOp op) override;
  /// Straight ncclReduceScatter / ncclAllGather on the flat tensors (no packing copies).
  WorkPtr reduce_scatter_tensor(Tensor output, Tensor input, ReduceOp op) override;
  WorkPtr allgather_into_tensor(Tensor output, Tensor input) override;
  WorkPtr send(Tensor t, int dst, int tag) override;
  WorkPtr recv(Tensor t, int src, int tag) override;
  /// Sends `send_t` to `dst` and receives `recv_t` from `src` in one NCCL group, so that ranks
  /// exchanging with each other (pipeline stages, rings) cannot deadlock on the order of their
  /// separate send and recv calls.
  WorkPtr send_recv(Tensor send_t, int dst, Tensor recv_t, int src);
  WorkPtr barrier() override;

  struct Impl;

 private:
  void check_peer(const char* op, const Tensor& t, int peer) const;
  /// `op` run on a device copy of host tensor `t`; with `copy_back`, wait() copies the result
  /// into `t` (which must then be contiguous).
  WorkPtr staged(const char* name, Tensor t, bool copy_back, const std::function<WorkPtr(Tensor)>& op);

  std::shared_ptr<Store> store_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::dist
