// The bucket bookkeeping shared by DDP's and ZeRO's gradient reducers; see bucketed_reducer.h.
#include "distributed/data_parallel/bucketed_reducer.h"

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

BucketedReducer::BucketedReducer(std::string owner, std::vector<std::string> names, std::vector<Tensor> params,
                                 const std::vector<int>& group_of, std::shared_ptr<ProcessGroup> pg,
                                 ReducerOptions options, int64_t pad_to)
    : owner_(std::move(owner)), names_(std::move(names)), params_(std::move(params)), pg_(std::move(pg)),
      options_(options) {
  KILN_ASSERT(names_.size() == params_.size() && (group_of.empty() || group_of.size() == params_.size()),
              "{}: {} names and {} groups for {} parameters", owner_, names_.size(), group_of.size(), params_.size());
  KILN_ASSERT(pad_to > 0, "{}: bucket padding {}", owner_, pad_to);
  KILN_CHECK(options.first_bucket_bytes > 0 && options.bucket_cap_bytes > 0,
             "{}: bucket sizes must be positive, got first {} and cap {} bytes", owner_, options.first_bucket_bytes,
             options.bucket_cap_bytes);
  for (size_t i = 0; i < params_.size(); ++i)
    KILN_CHECK(params_[i].is_floating_point(), "{}: parameter '{}' has dtype {}; only floating parameters get "
               "gradients", owner_, names_[i], params_[i].dtype());
  build_buckets(group_of, pad_to);
  ready_.assign(params_.size(), false);
}

void BucketedReducer::register_hooks(const std::shared_ptr<BucketedReducer>& reducer) {
  std::weak_ptr<BucketedReducer> weak = reducer;
  for (size_t i = 0; i < reducer->params_.size(); ++i) {
    reducer->params_[i].register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (auto self = weak.lock()) self->mark_ready(i);
    });
  }
}

void BucketedReducer::build_buckets(const std::vector<int>& group_of, int64_t pad_to) {
  where_.assign(params_.size(), {0, 0});
  // Reverse registration order; a bucket holds one dtype, device and group, and closes at its cap.
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    const int group = group_of.empty() ? 0 : group_of[k];
    bool fits = false;
    if (!buckets_.empty()) {
      const ReducerBucket& b = buckets_.back();
      const Tensor& first = params_[b.params.front()];
      int64_t cap = !options_.overlap ? INT64_MAX
                    : buckets_.size() == 1 ? options_.first_bucket_bytes
                                           : options_.bucket_cap_bytes;
      fits = first.dtype() == p.dtype() && first.device() == p.device() && b.group == group &&
             b.numel * static_cast<int64_t>(p.element_size()) < cap;
    }
    if (!fits) {
      buckets_.push_back(ReducerBucket{});
      buckets_.back().group = group;
    }
    ReducerBucket& b = buckets_.back();
    where_[k] = {buckets_.size() - 1, b.params.size()};
    b.params.push_back(k);
    b.offsets.push_back(b.numel);
    b.numel += p.numel();
  }
  for (ReducerBucket& b : buckets_) {
    const Tensor& p = params_[b.params.front()];
    b.flat = zeros({(b.numel + pad_to - 1) / pad_to * pad_to}, TensorOptions().dtype(p.dtype()).device(p.device()));
  }
}

std::vector<std::vector<std::string>> BucketedReducer::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const ReducerBucket& b : buckets_) {
    out.emplace_back();
    for (size_t i : b.params) out.back().push_back(names_[i]);
  }
  return out;
}

Tensor BucketedReducer::bucket_view(size_t i) const {
  auto [bi, slot] = where_[i];
  const ReducerBucket& b = buckets_[bi];
  return b.flat.narrow(0, b.offsets[slot], params_[i].numel()).view(params_[i].sizes());
}

bool BucketedReducer::grad_is_bucket_view(size_t i) const {
  const Tensor& g = params_[i].grad();
  if (!g.defined()) return false;
  Tensor view = bucket_view(i);
  return g.data_ptr() == view.data_ptr() && g.sizes() == view.sizes() && g.strides() == view.strides();
}

void BucketedReducer::take_gradient(size_t i) {
  // With bucket views the gradient is usually accumulated in the bucket already; it is copied in
  // only when .grad was reset (zero_grad(set_to_none)) or replaced, and then becomes the view.
  if (options_.gradient_as_bucket_view && grad_is_bucket_view(i)) return;
  NoGradGuard no_grad;
  Tensor slot = bucket_view(i);
  slot.copy_(params_[i].grad());
  if (options_.gradient_as_bucket_view) params_[i].set_grad(slot);
}

void BucketedReducer::prepare_for_backward() {
  for (ReducerBucket& b : buckets_) {
    KILN_CHECK(b.work == nullptr, "{}: the previous backward did not finish its reduction", owner_);
    b.pending = static_cast<int>(b.params.size());
  }
  ready_.assign(params_.size(), false);
  next_launch_ = 0;
  launched_early_ = 0;
  callback_queued_ = false;
  armed_ = true;
}

void BucketedReducer::mark_ready(size_t i) {
  if (!armed_) return;  // no_sync, or a backward that did not go through DDP's forward
  if (!callback_queued_) {
    std::weak_ptr<BucketedReducer> weak = weak_from_this();
    autograd::queue_callback([weak] {
      if (auto self = weak.lock()) self->finalize();
    });
    callback_queued_ = true;
  }
  KILN_ASSERT(i < params_.size(), "{}: parameter index {} of {}", owner_, i, params_.size());
  KILN_CHECK(!ready_[i], "{}: parameter '{}' got its gradient twice in one backward", owner_, names_[i]);
  ready_[i] = true;
  take_gradient(i);
  if (--buckets_[where_[i].first].pending == 0 && options_.overlap) {
    size_t before = next_launch_;
    launch_ready_buckets();
    launched_early_ += static_cast<int>(next_launch_ - before);
  }
}

void BucketedReducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    ReducerBucket& b = buckets_[next_launch_];
    // The padding is reduced too: zero it, whatever was written into it since (e.g. through a
    // ZeRO shard's gradient, a view of its chunk).
    if (b.flat.numel() > b.numel) b.flat.narrow(0, b.numel, b.flat.numel() - b.numel).zero_();
    b.work = launch(next_launch_++);
  }
}

void BucketedReducer::finalize() {
  armed_ = false;
  std::vector<std::string> unused;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (ready_[i]) continue;
    if (!options_.find_unused_parameters) {
      unused.push_back(names_[i]);
      continue;
    }
    bucket_view(i).zero_();
    ReducerBucket& b = buckets_[where_[i].first];
    --b.pending;
    KILN_ASSERT(b.pending >= 0, "{}: bucket {} counted more gradients than it holds", owner_, where_[i].first);
  }
  if (!unused.empty()) {
    // Reductions already launched must still complete before anything else is issued.
    for (ReducerBucket& b : buckets_)
      if (b.work) { b.work->wait(); b.work = nullptr; }
    fail("{}: parameters {} got no gradient in this backward; every rank must use every parameter, or "
         "construct DDP with find_unused_parameters = true", owner_, unused);
  }
  launch_ready_buckets();

  auto walk_done = Work::Clock::now();
  stats_ = ReducerStats{static_cast<int>(buckets_.size()), launched_early_, 0, 0};
  for (ReducerBucket& b : buckets_) {
    b.work->wait();
    stats_.comm_seconds += seconds(b.work->finished() - b.work->started());
    b.work = nullptr;
  }
  stats_.exposed_seconds = seconds(Work::Clock::now() - walk_done);
  NoGradGuard no_grad;
  finish();
}

}  // namespace kiln::dist
