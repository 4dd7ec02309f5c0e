#include "distributed/reducer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "autograd/engine.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"

namespace kiln::dist {
namespace {
double seconds(Work::Clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

std::shared_ptr<Reducer> Reducer::create(std::vector<std::string> names, std::vector<Tensor> params,
                                         std::shared_ptr<ProcessGroup> pg, ReducerOptions options) {
  std::shared_ptr<Reducer> r(new Reducer(std::move(names), std::move(params), std::move(pg), options));
  std::weak_ptr<Reducer> weak = r;
  for (size_t i = 0; i < r->params_.size(); ++i) {
    r->params_[i].register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (auto self = weak.lock()) self->mark_ready(i);
    });
  }
  return r;
}

Reducer::Reducer(std::vector<std::string> names, std::vector<Tensor> params, std::shared_ptr<ProcessGroup> pg,
                 ReducerOptions options)
    : names_(std::move(names)), params_(std::move(params)), pg_(std::move(pg)), options_(options) {
  KILN_ASSERT(names_.size() == params_.size(), "Reducer: {} names for {} parameters", names_.size(), params_.size());
  KILN_CHECK(options.first_bucket_bytes > 0 && options.bucket_cap_bytes > 0,
             "DistributedDataParallel: bucket sizes must be positive, got first {} and cap {} bytes",
             options.first_bucket_bytes, options.bucket_cap_bytes);
  for (size_t i = 0; i < params_.size(); ++i)
    KILN_CHECK(params_[i].is_floating_point(), "DistributedDataParallel: parameter '{}' has dtype {}; only floating "
               "parameters get gradients", names_[i], params_[i].dtype());
  build_buckets(options);
  ready_.assign(params_.size(), false);
}

void Reducer::build_buckets(const ReducerOptions& options) {
  where_.assign(params_.size(), {0, 0});
  // Reverse registration order; a bucket holds one dtype and device, and closes at its cap.
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    bool fits = false;
    if (!buckets_.empty()) {
      const Bucket& b = buckets_.back();
      const Tensor& first = params_[b.params.front()];
      int64_t cap = !options.overlap ? INT64_MAX
                    : buckets_.size() == 1 ? options.first_bucket_bytes
                                           : options.bucket_cap_bytes;
      int64_t bytes = (b.offsets.back() + params_[b.params.back()].numel()) * static_cast<int64_t>(p.element_size());
      fits = first.dtype() == p.dtype() && first.device() == p.device() && bytes < cap;
    }
    if (!fits) buckets_.push_back(Bucket{});
    Bucket& b = buckets_.back();
    int64_t offset = b.params.empty() ? 0 : b.offsets.back() + params_[b.params.back()].numel();
    where_[k] = {buckets_.size() - 1, b.params.size()};
    b.params.push_back(k);
    b.offsets.push_back(offset);
  }
  for (Bucket& b : buckets_) {
    const Tensor& p = params_[b.params.back()];
    int64_t n = b.offsets.back() + p.numel();
    b.flat = zeros({n}, TensorOptions().dtype(p.dtype()).device(p.device()));
  }
}

std::vector<std::vector<std::string>> Reducer::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const Bucket& b : buckets_) {
    out.emplace_back();
    for (size_t i : b.params) out.back().push_back(names_[i]);
  }
  return out;
}

Tensor Reducer::bucket_view(size_t i) const {
  auto [bi, slot] = where_[i];
  const Bucket& b = buckets_[bi];
  return b.flat.narrow(0, b.offsets[slot], params_[i].numel()).view(params_[i].sizes());
}

namespace {
/// True when `grad` is exactly the bucket slot `view` (same memory, same shape and strides).
bool is_view_of_slot(const Tensor& grad, const Tensor& view) {
  return grad.defined() && grad.data_ptr() == view.data_ptr() && grad.sizes() == view.sizes() &&
         grad.strides() == view.strides();
}
}  // namespace

void Reducer::prepare_for_backward() {
  for (Bucket& b : buckets_) {
    KILN_CHECK(b.work == nullptr, "DistributedDataParallel: the previous backward did not finish its reduction");
    b.pending = static_cast<int>(b.params.size());
  }
  ready_.assign(params_.size(), false);
  next_launch_ = 0;
  launched_early_ = 0;
  callback_queued_ = false;
  armed_ = true;
}

void Reducer::mark_ready(size_t i) {
  if (!armed_) return;  // no_sync, or a backward that did not go through DDP's forward
  if (!callback_queued_) {
    std::weak_ptr<Reducer> weak = weak_from_this();
    autograd::queue_callback([weak] {
      if (auto self = weak.lock()) self->finalize();
    });
    callback_queued_ = true;
  }
  KILN_ASSERT(i < params_.size(), "Reducer: parameter index {} of {}", i, params_.size());
  KILN_CHECK(!ready_[i], "DistributedDataParallel: parameter '{}' got its gradient twice in one backward", names_[i]);
  ready_[i] = true;
  Bucket& b = buckets_[where_[i].first];
  Tensor g = params_[i].grad();
  Tensor slot = bucket_view(i);
  // With bucket views the gradient is usually accumulated in the bucket already; it is copied in
  // only when .grad was reset (zero_grad(set_to_none)) or replaced, and then becomes the view.
  if (!options_.gradient_as_bucket_view || !is_view_of_slot(g, slot)) {
    NoGradGuard no_grad;
    slot.copy_(g);
    if (options_.gradient_as_bucket_view) params_[i].set_grad(slot);
  }
  if (--b.pending == 0 && options_.overlap) {
    size_t before = next_launch_;
    launch_ready_buckets();
    launched_early_ += static_cast<int>(next_launch_ - before);
  }
}

void Reducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    Bucket& b = buckets_[next_launch_++];
    b.work = pg_->allreduce(b.flat, ReduceOp::kAvg);
  }
}

void Reducer::finalize() {
  armed_ = false;
  std::vector<std::string> unused;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    if (!options_.find_unused_parameters) {
      unused.push_back(names_[i]);
      continue;
    }
    auto [bi, slot] = where_[i];
    buckets_[bi].flat.narrow(0, buckets_[bi].offsets[slot], params_[i].numel()).zero_();
    --buckets_[bi].pending;
    KILN_ASSERT(buckets_[bi].pending >= 0, "Reducer: bucket {} counted more gradients than it holds", bi);
  }
  if (!unused.empty()) {
    // Reductions already launched must still complete before anything else is issued.
    for (Bucket& b : buckets_)
      if (b.work) { b.work->wait(); b.work = nullptr; }
    fail("DistributedDataParallel: parameters {} got no gradient in this backward; every rank must "
         "use every parameter, or construct DDP with find_unused_parameters = true",
         unused);
  }
  launch_ready_buckets();

  auto walk_done = Work::Clock::now();
  stats_ = ReducerStats{static_cast<int>(buckets_.size()), launched_early_, 0, 0};
  for (Bucket& b : buckets_) {
    b.work->wait();
    stats_.comm_seconds += seconds(b.work->finished() - b.work->started());
    b.work = nullptr;
  }
  stats_.exposed_seconds = seconds(Work::Clock::now() - walk_done);

  NoGradGuard no_grad;
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
