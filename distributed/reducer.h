// The gradient reducer behind DistributedDataParallel. Parameters are grouped into buckets in
// reverse registration order (roughly the order backward produces their gradients): a small
// first bucket so communication starts early, then buckets up to a cap. As each parameter's
// gradient is accumulated, its hook copies it into its bucket; when a bucket is full, and every
// bucket before it has been launched, its all-reduce starts on the process group's thread while
// backward goes on. Launching strictly in bucket order keeps every rank's collectives in the
// same order whatever order its hooks fire in. At the end of backward (an engine callback) the
// reducer waits for the reductions and writes the averaged gradients back into `.grad` (or, with
// gradient_as_bucket_view, leaves each `.grad` a view of its bucket, so nothing is copied back).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "distributed/process_group.h"

namespace kiln::dist {

struct ReducerOptions {
  int64_t first_bucket_bytes = 1 << 20;
  int64_t bucket_cap_bytes = 25 << 20;
  /// Parameters that get no gradient in a backward are reduced as zeros instead of an error.
  bool find_unused_parameters = false;
  /// false: one all-reduce over every gradient after backward ends (the baseline overlap is
  /// measured against).
  bool overlap = true;
  /// Gradients live in the buckets: see DDPOptions::gradient_as_bucket_view.
  bool gradient_as_bucket_view = true;
};

/// Timings of the last synchronised backward pass.
struct ReducerStats {
  int buckets = 0;
  int launched_during_backward = 0;  // buckets whose all-reduce started before the graph walk ended
  double comm_seconds = 0;     // sum over buckets of the time their all-reduce ran
  double exposed_seconds = 0;  // time backward waited for communication after the graph walk
};

/// What DistributedDataParallel drives during a step: the all-reducing Reducer below, or ZeRO's
/// reduce-scattering one (distributed/zero_reducer.h), which a ZeroRedundancyOptimizer installs.
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

class Reducer final : public GradientReducer, public std::enable_shared_from_this<Reducer> {
 public:
  /// Builds the buckets and registers a gradient hook on every parameter (the hooks hold the
  /// reducer weakly: they do nothing once it is gone).
  static std::shared_ptr<Reducer> create(std::vector<std::string> names, std::vector<Tensor> params,
                                         std::shared_ptr<ProcessGroup> pg, ReducerOptions options);
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// Arms the reducer for the next backward (called by DDP's forward in a synchronised step).
  void prepare_for_backward() override;
  /// Disarms it: the next backward accumulates locally (no_sync).
  void disarm() override { armed_ = false; }
  const ReducerStats& stats() const override { return stats_; }
  /// Parameter names per bucket, in launch order.
  std::vector<std::vector<std::string>> bucket_names() const override;

 private:
  Reducer(std::vector<std::string> names, std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg,
          ReducerOptions options);
  struct Bucket {
    std::vector<size_t> params;   // indices into params_
    std::vector<int64_t> offsets; // element offset of each in `flat`
    Tensor flat;
    int pending = 0;
    WorkPtr work;
  };
  void build_buckets(const ReducerOptions& options);
  /// Parameter i's slot of its bucket, shaped like the parameter.
  Tensor bucket_view(size_t i) const;
  void mark_ready(size_t param);
  void launch_ready_buckets();
  void finalize();

  std::vector<std::string> names_;
  std::vector<Tensor> params_;
  std::shared_ptr<ProcessGroup> pg_;
  ReducerOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> where_;  // param -> (bucket, slot)
  std::vector<bool> ready_;
  size_t next_launch_ = 0;
  bool armed_ = false;
  bool callback_queued_ = false;
  int launched_early_ = 0;
  ReducerStats stats_;
};

}  // namespace kiln::dist
