// ZeRO stage 1's gradient reducer: DDP's buckets (reverse registration order, a small first
// bucket, a cap; launched strictly in order from the gradient hooks while backward runs), but each
// bucket is reduce-scattered instead of all-reduced. A bucket's parameters are laid end to end in
// a flat buffer padded to a multiple of the world size; rank r owns chunk r of every bucket: a
// leaf `shard` holding those elements of the parameters, whose `.grad` receives the averaged
// gradient of the chunk. The optimizer steps the shards only; gather_parameters() all-gathers
// them back into every rank's parameters. A bucket never mixes parameter groups, dtypes or
// devices.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/reducer.h"

namespace kiln::dist {

struct ZeroBucket {
  std::vector<size_t> params;    // indices into the reducer's parameters, in bucket order
  std::vector<int64_t> offsets;  // element offset of each in the flat buffer
  int group = 0;                 // the parameter group of all of them
  int64_t numel = 0;             // elements of the parameters (before padding)
  int64_t shard_numel = 0;       // padded numel / world size
  Tensor flat;                   // padded gradients; reused as the all-gather target
  Tensor shard;                  // this rank's chunk of the parameters: the leaf the optimizer steps
  Tensor shard_grad;             // this rank's chunk of the averaged gradients
  int pending = 0;
  WorkPtr work;
};

class ZeroReducer final : public GradientReducer, public std::enable_shared_from_this<ZeroReducer> {
 public:
  /// `group_of[i]` is the parameter group of params[i]. Registers a gradient hook on every
  /// parameter (held weakly, as Reducer's), and takes each shard from the parameters' values.
  static std::shared_ptr<ZeroReducer> create(std::vector<std::string> names, std::vector<Tensor> params,
                                             std::vector<int> group_of, std::shared_ptr<ProcessGroup> pg,
                                             ReducerOptions options);
  ZeroReducer(const ZeroReducer&) = delete;
  ZeroReducer& operator=(const ZeroReducer&) = delete;

  void prepare_for_backward() override;
  void disarm() override { armed_ = false; }
  const ReducerStats& stats() const override { return stats_; }
  std::vector<std::vector<std::string>> bucket_names() const override;

  /// Copies the parameters' current values into the shards (after anything other than the
  /// optimizer changed them: a loaded checkpoint, a broadcast).
  void refresh_shards();
  /// All-gathers every bucket's shard and writes the result into the parameters (a collective).
  void gather_parameters();

  const std::vector<ZeroBucket>& buckets() const { return buckets_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<Tensor>& params() const { return params_; }
  ProcessGroup& process_group() const { return *pg_; }

 private:
  ZeroReducer(std::vector<std::string> names, std::vector<Tensor> params, std::vector<int> group_of,
              std::shared_ptr<ProcessGroup> pg, ReducerOptions options);
  void build_buckets(const std::vector<int>& group_of);
  void mark_ready(size_t param);
  void launch_ready_buckets();
  void finalize();

  std::vector<std::string> names_;
  std::vector<Tensor> params_;
  std::shared_ptr<ProcessGroup> pg_;
  ReducerOptions options_;
  std::vector<ZeroBucket> buckets_;
  std::vector<std::pair<size_t, size_t>> where_;  // param -> (bucket, slot)
  std::vector<bool> ready_;
  size_t next_launch_ = 0;
  bool armed_ = false;
  bool callback_queued_ = false;
  int launched_early_ = 0;
  ReducerStats stats_;
};

}  // namespace kiln::dist
