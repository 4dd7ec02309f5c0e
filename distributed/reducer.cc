// DDP's all-reducing gradient reducer; see reducer.h (the bucket bookkeeping is in
// bucketed_reducer.cc).
#include "distributed/reducer.h"

#include "core/grad_mode.h"

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

namespace {
/// True when `grad` is exactly the bucket slot `view` (same memory, same shape and strides).
bool is_view_of_slot(const Tensor& grad, const Tensor& view) {
  return grad.defined() && grad.data_ptr() == view.data_ptr() && grad.sizes() == view.sizes() &&
         grad.strides() == view.strides();
}
}  // namespace

void Reducer::take_gradient(size_t i, const Tensor& slot) {
  // With bucket views the gradient is usually accumulated in the bucket already; it is copied in
  // only when .grad was reset (zero_grad(set_to_none)) or replaced, and then becomes the view.
  Tensor g = params_[i].grad();
  if (options_.gradient_as_bucket_view && is_view_of_slot(g, slot)) return;
  NoGradGuard no_grad;
  Tensor s = slot;
  s.copy_(g);
  if (options_.gradient_as_bucket_view) params_[i].set_grad(s);
}

WorkPtr Reducer::launch(size_t b) { return pg_->allreduce(buckets_[b].flat, ReduceOp::kAvg); }

void Reducer::finish() {
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor avg = bucket_view(i);
    if (options_.gradient_as_bucket_view) {
      if (!is_view_of_slot(p.grad(), avg)) p.set_grad(avg);  // an unused parameter's zeros
    } else if (p.grad().defined()) {
      p.grad().copy_(avg);
    } else {
      p.set_grad(avg.clone());
    }
  }
}

}  // namespace kiln::dist
