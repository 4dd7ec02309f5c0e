// ZeRO stage 1's gradient reducer: the bucketed reducer of bucketed_reducer.h (DDP's buckets,
// launched in order from the gradient hooks while backward runs), but each bucket is
// reduce-scattered instead of all-reduced. A bucket's flat buffer is padded to a multiple of the
// world size; rank r owns chunk r of every bucket: a leaf `shard` holding those elements of the
// parameters. The gradients live in the buckets, as DDP's do with gradient_as_bucket_view: each
// parameter's `.grad` is a view of its slot, the reduce-scatter runs in place (its output is this
// rank's chunk of the bucket), and the shard's `.grad` is a view of that chunk. So beside the
// parameters ZeRO holds one full-size gradient buffer (the buckets) and 1/N-size shards; no copy
// of the gradient, full or sharded. The optimizer steps the shards only; gather_parameters()
// all-gathers them back into every rank's parameters through the buckets (no gradient is needed
// then), and leaves the buckets zeroed for the next backward. A bucket never mixes parameter
// groups, dtypes or devices.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/data_parallel/bucketed_reducer.h"

namespace kiln::dist {

/// This rank's chunk of one bucket.
struct ZeroShard {
  int64_t numel = 0;  // padded bucket numel / world size
  Tensor shard;       // this rank's chunk of the parameters: the leaf the optimizer steps; its
                      // .grad, after a synchronised backward, is grad_chunk() of its bucket
};

class ZeroReducer final : public BucketedReducer {
 public:
  /// `group_of[i]` is the parameter group of params[i]. Registers a gradient hook on every
  /// parameter (held weakly), and takes each shard from the parameters' values.
  static std::shared_ptr<ZeroReducer> create(std::vector<std::string> names, std::vector<Tensor> params,
                                             std::vector<int> group_of, std::shared_ptr<ProcessGroup> pg,
                                             ReducerOptions options);

  /// Copies the parameters' current values into the shards (after anything other than the
  /// optimizer changed them: a loaded checkpoint, a broadcast).
  void refresh_shards();
  /// All-gathers every bucket's shard and writes the result into the parameters (a collective).
  /// Then zeroes the buckets and makes each parameter's `.grad` its (zero) bucket view again, so
  /// the next backward, no_sync ones included, accumulates straight into the buckets.
  void gather_parameters();
  /// This rank's chunk of bucket `b`: the reduce-scatter's output, and its shard's gradient.
  Tensor grad_chunk(size_t b) const;

  /// One per bucket, in bucket order.
  const std::vector<ZeroShard>& shards() const { return shards_; }

 private:
  ZeroReducer(std::vector<std::string> names, std::vector<Tensor> params, const std::vector<int>& group_of,
              std::shared_ptr<ProcessGroup> pg, ReducerOptions options, int world);
  WorkPtr launch(size_t b) override;
  void finish() override;

  std::vector<ZeroShard> shards_;
};

}  // namespace kiln::dist
