// The gradient reducer behind DistributedDataParallel: the bucketed reducer of
// bucketed_reducer.h with an averaging all-reduce per bucket. At the end of backward the averaged
// gradients are written back into `.grad` (or, with gradient_as_bucket_view, each `.grad` stays a
// view of its bucket, so nothing is copied in or back).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "distributed/data_parallel/bucketed_reducer.h"

namespace kiln::dist {

class Reducer final : public BucketedReducer {
 public:
  /// Builds the buckets and registers a gradient hook on every parameter.
  static std::shared_ptr<Reducer> create(std::vector<std::string> names, std::vector<Tensor> params,
                                         std::shared_ptr<ProcessGroup> pg, ReducerOptions options);

 private:
  Reducer(std::vector<std::string> names, std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg,
          ReducerOptions options);
  WorkPtr launch(size_t b) override;
  void finish() override;
};

}  // namespace kiln::dist
