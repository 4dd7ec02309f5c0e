// DDP's all-reducing gradient reducer; see reducer.h (the bucket bookkeeping is in
// bucketed_reducer.cc).
#include "distributed/data_parallel/reducer.h"

namespace kiln::dist {

std::shared_ptr<Reducer> Reducer::create(std::vector<std::string> names, std::vector<Tensor> params,
                                         std::shared_ptr<ProcessGroup> pg, ReducerOptions options) {
  std::shared_ptr<Reducer> r(new Reducer(std::move(names), std::move(params), std::move(pg), options));
  register_hooks(r);
  return r;
}

Reducer::Reducer(std::vector<std::string> names, std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg,
                 ReducerOptions options)
    : BucketedReducer("DistributedDataParallel", std::move(names), std::move(params), {}, std::move(pg), options,
                      1) {}

WorkPtr Reducer::launch(size_t b) { return pg_->allreduce(buckets_[b].flat, ReduceOp::kAvg); }

void Reducer::finish() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor avg = bucket_view(i);
    if (options_.gradient_as_bucket_view) {
      if (!grad_is_bucket_view(i)) p.set_grad(avg);  // an unused parameter's zeros
    } else if (p.grad().defined()) {
      p.grad().copy_(avg);
    } else {
      p.set_grad(avg.clone());
    }
  }
}

}  // namespace kiln::dist
