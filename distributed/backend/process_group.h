// ProcessGroup: the collectives every rank of a job calls in the same order (the c10d contract).
// Every call is asynchronous: it returns a Work at once and the backend runs it in issue order;
// `Work::wait()` blocks until it is done and rethrows its error. Tensors are reduced in place
// and must not be touched until their Work completes.
//
// A collective that does not finish within `timeout()` fails on every waiting rank with an
// error naming the collective, its sequence number (the n-th collective of this group, the same
// on every rank) and the ranks that never entered it: dist::TimeoutError when the deadline
// passed, dist::PeerError when a peer went away (distributed/store/errors.h).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/store/store.h"

namespace kiln::dist {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
const char* reduce_op_name(ReduceOp op);

/// The handle of one asynchronous collective.
class Work {
 public:
  using Clock = std::chrono::steady_clock;
  Work(std::string name, uint64_t seq) : name_(std::move(name)), seq_(seq) {}
  virtual ~Work() = default;

  virtual bool is_completed() const;
  /// Blocks until done (for a backend with its own stream: until the caller's current stream
  /// is ordered after it); rethrows the collective's error.
  virtual void wait();
  /// The collective's name ("allreduce") and sequence number.
  const std::string& name() const { return name_; }
  uint64_t seq() const { return seq_; }
  /// When the backend started and finished running it (valid once completed).
  Clock::time_point started() const;
  Clock::time_point finished() const;

  // Backend side.
  void mark_started();
  void finish(std::exception_ptr error = nullptr);

 protected:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  std::string name_;
  uint64_t seq_;
  Clock::time_point started_, finished_;
};
using WorkPtr = std::shared_ptr<Work>;

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  Millis timeout() const { return timeout_; }
  virtual std::string backend() const = 0;

  /// Reduces `t` across ranks; every rank ends with the result. kAvg needs a floating dtype.
  virtual WorkPtr allreduce(Tensor t, ReduceOp op = ReduceOp::kSum) = 0;
  /// Copies root's `t` into every rank's `t`.
  virtual WorkPtr broadcast(Tensor t, int root) = 0;
  /// Reduces into root's `t` (other ranks' `t` are left as they were).
  virtual WorkPtr reduce(Tensor t, int root, ReduceOp op = ReduceOp::kSum) = 0;
  /// outputs[r] receives rank r's `input` (size() outputs, each shaped like input).
  virtual WorkPtr allgather(std::vector<Tensor> outputs, Tensor input) = 0;
  /// output = reduction over ranks of inputs[rank()] (size() inputs, each shaped like output).
  virtual WorkPtr reduce_scatter(Tensor output, std::vector<Tensor> inputs, ReduceOp op = ReduceOp::kSum) = 0;
  /// The flat forms ZeRO's buckets use (torch's reduce_scatter_tensor / all_gather_into_tensor):
  /// `input` holds size() equal chunks back to back; `output` (shaped like one chunk, same dtype)
  /// receives the reduction of chunk rank() over ranks. `output` may be chunk rank() of `input`
  /// (in place, as ZeRO's buckets run it); then the other chunks may be left holding partial
  /// results, else `input` is left as it was. The default goes through reduce_scatter with views;
  /// a backend with a flat primitive overrides it.
  virtual WorkPtr reduce_scatter_tensor(Tensor output, Tensor input, ReduceOp op = ReduceOp::kSum);
  /// `output` (size() chunks back to back, each shaped like `input` flattened) receives every
  /// rank's `input` in rank order.
  virtual WorkPtr allgather_into_tensor(Tensor output, Tensor input);
  /// Point to point; a send matches the recv on `dst` with the same tag.
  virtual WorkPtr send(Tensor t, int dst, int tag = 0) = 0;
  virtual WorkPtr recv(Tensor t, int src, int tag = 0) = 0;
  virtual WorkPtr barrier() = 0;

 protected:
  ProcessGroup(int rank, int size, Millis timeout) : rank_(rank), size_(size), timeout_(timeout) {}
  int rank_;
  int size_;
  Millis timeout_;
};

}  // namespace kiln::dist
