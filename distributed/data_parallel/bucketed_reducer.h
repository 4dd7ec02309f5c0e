// What DDP's all-reducing Reducer (reducer.h) and ZeRO-1's reduce-scattering ZeroReducer
// (zero_reducer.h) share: parameters grouped into buckets in reverse registration order (roughly
// the order backward produces their gradients), a small first bucket so communication starts
// early, then buckets up to a cap; a bucket never mixes dtypes, devices or parameter groups. Each
// parameter's gradient hook hands its gradient to the bucket; when a bucket is full, and every
// bucket before it has been launched, its collective starts on the process group's thread while
// backward goes on. Launching strictly in bucket order keeps every rank's collectives in the same
// order whatever order its hooks fire in. At the end of backward (an engine callback) the reducer
// waits for the collectives, records the timings and lets the subclass use the result.
//
// A gradient enters its bucket slot here (take_gradient): with gradient_as_bucket_view the
// parameter's `.grad` becomes a view of its slot, so later backwards accumulate straight into the
// bucket and no second full-size gradient exists. A subclass supplies the collective a full bucket
// runs (launch) and what happens once every bucket is reduced (finish).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/backend/process_group.h"

namespace kiln::dist {

struct ReducerOptions {
  int64_t first_bucket_bytes = 1 << 20;
  int64_t bucket_cap_bytes = 25 << 20;
  /// Parameters that get no gradient in a backward are reduced as zeros instead of an error.
  bool find_unused_parameters = false;
  /// false: one collective over every gradient after backward ends (the baseline overlap is
  /// measured against).
  bool overlap = true;
  /// Gradients live in the buckets: see DDPOptions::gradient_as_bucket_view (ZeRO's reducer
  /// always sets it).
  bool gradient_as_bucket_view = true;
};

/// Timings of the last synchronised backward pass.
struct ReducerStats {
  int buckets = 0;
  int launched_during_backward = 0;  // buckets whose collective started before the graph walk ended
  double comm_seconds = 0;     // sum over buckets of the time their collective ran
  double exposed_seconds = 0;  // time backward waited for communication after the graph walk
};

/// What DistributedDataParallel drives during a step: the all-reducing Reducer, or ZeRO's
/// reduce-scattering one, which a ZeroRedundancyOptimizer installs.
class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  /// Arms the next backward (a synchronised forward).
  virtual void prepare_for_backward() = 0;
  /// The next backward accumulates locally (no_sync).
  virtual void disarm() = 0;
  virtual const ReducerStats& stats() const = 0;
  /// Parameter names per bucket, in launch order.
  virtual std::vector<std::vector<std::string>> bucket_names() const = 0;
};

/// One bucket: its parameters laid end to end in `flat` (padded to a multiple of the reducer's
/// `pad_to`; its padding is zeroed before each collective).
struct ReducerBucket {
  std::vector<size_t> params;    // indices into the reducer's parameters, in bucket order
  std::vector<int64_t> offsets;  // element offset of each in `flat`
  int group = 0;                 // the parameter group of all of them
  int64_t numel = 0;             // elements of the parameters (before padding)
  Tensor flat;
  int pending = 0;  // gradients still to come in this backward
  WorkPtr work;     // the collective in flight
};

class BucketedReducer : public GradientReducer, public std::enable_shared_from_this<BucketedReducer> {
 public:
  BucketedReducer(const BucketedReducer&) = delete;
  BucketedReducer& operator=(const BucketedReducer&) = delete;

  void prepare_for_backward() override;
  void disarm() override { armed_ = false; }
  const ReducerStats& stats() const override { return stats_; }
  std::vector<std::vector<std::string>> bucket_names() const override;

  const std::vector<ReducerBucket>& buckets() const { return buckets_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<Tensor>& params() const { return params_; }
  ProcessGroup& process_group() const { return *pg_; }

 protected:
  /// `owner` names the user-facing class in errors. `group_of[i]` is params[i]'s parameter group
  /// (empty: all in one). Each bucket's buffer is padded to a multiple of `pad_to` elements.
  BucketedReducer(std::string owner, std::vector<std::string> names, std::vector<Tensor> params,
                  const std::vector<int>& group_of, std::shared_ptr<ProcessGroup> pg, ReducerOptions options,
                  int64_t pad_to);
  /// Registers a gradient hook on every parameter; the hooks hold the reducer weakly (they do
  /// nothing once it is gone). Called by the subclasses' factories once the object is shared.
  static void register_hooks(const std::shared_ptr<BucketedReducer>& reducer);

  /// Parameter i's slot of its bucket, shaped like the parameter.
  Tensor bucket_view(size_t i) const;
  /// True when parameter i's `.grad` is exactly its bucket_view (same memory, shape and strides).
  bool grad_is_bucket_view(size_t i) const;
  /// Starts the collective of full bucket `b`.
  virtual WorkPtr launch(size_t b) = 0;
  /// Runs at the end of backward once every bucket's collective has finished.
  virtual void finish() = 0;

  const std::string owner_;
  std::vector<std::string> names_;
  std::vector<Tensor> params_;
  std::shared_ptr<ProcessGroup> pg_;
  ReducerOptions options_;
  std::vector<ReducerBucket> buckets_;

 private:
  void build_buckets(const std::vector<int>& group_of, int64_t pad_to);
  void mark_ready(size_t param);
  /// Brings parameter i's fresh gradient into its bucket slot (and, with bucket views, makes the
  /// slot its `.grad`).
  void take_gradient(size_t i);
  void launch_ready_buckets();
  void finalize();

  std::vector<std::pair<size_t, size_t>> where_;  // param -> (bucket, slot)
  std::vector<bool> ready_;
  size_t next_launch_ = 0;
  bool armed_ = false;
  bool callback_queued_ = false;
  int launched_early_ = 0;
  ReducerStats stats_;
};

}  // namespace kiln::dist
