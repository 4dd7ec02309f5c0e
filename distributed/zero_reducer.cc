// ZeRO-1's reduce-scattering reducer; see zero_reducer.h. The hook/launch/finalize flow is
// Reducer's (reducer.cc), with reduce_scatter_tensor in place of the all-reduce and the shards'
// gradients as the result.
#include "distributed/zero_reducer.h"

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

std::shared_ptr<ZeroReducer> ZeroReducer::create(std::vector<std::string> names, std::vector<Tensor> params,
                                                 std::vector<int> group_of, std::shared_ptr<ProcessGroup> pg,
                                                 ReducerOptions options) {
  std::shared_ptr<ZeroReducer> r(
      new ZeroReducer(std::move(names), std::move(params), std::move(group_of), std::move(pg), options));
  std::weak_ptr<ZeroReducer> weak = r;
  for (size_t i = 0; i < r->params_.size(); ++i) {
    r->params_[i].register_post_accumulate_grad_hook([weak, i](const Tensor&) {
      if (auto self = weak.lock()) self->mark_ready(i);
    });
  }
  return r;
}

ZeroReducer::ZeroReducer(std::vector<std::string> names, std::vector<Tensor> params, std::vector<int> group_of,
                         std::shared_ptr<ProcessGroup> pg, ReducerOptions options)
    : names_(std::move(names)), params_(std::move(params)), pg_(std::move(pg)), options_(options) {
  KILN_ASSERT(names_.size() == params_.size() && group_of.size() == params_.size(),
              "ZeroReducer: {} names and {} groups for {} parameters", names_.size(), group_of.size(), params_.size());
  KILN_CHECK(pg_ != nullptr, "ZeroRedundancyOptimizer: the process group is null");
  KILN_CHECK(!params_.empty(), "ZeroRedundancyOptimizer: no parameter requires a gradient");
  KILN_CHECK(options.first_bucket_bytes > 0 && options.bucket_cap_bytes > 0,
             "ZeroRedundancyOptimizer: bucket sizes must be positive, got first {} and cap {} bytes",
             options.first_bucket_bytes, options.bucket_cap_bytes);
  for (size_t i = 0; i < params_.size(); ++i)
    KILN_CHECK(params_[i].is_floating_point(), "ZeroRedundancyOptimizer: parameter '{}' has dtype {}; only floating "
               "parameters can be optimized", names_[i], params_[i].dtype());
  build_buckets(group_of);
  ready_.assign(params_.size(), false);
  refresh_shards();
}

void ZeroReducer::build_buckets(const std::vector<int>& group_of) {
  where_.assign(params_.size(), {0, 0});
  for (size_t k = params_.size(); k-- > 0;) {
    const Tensor& p = params_[k];
    bool fits = false;
    if (!buckets_.empty()) {
      const ZeroBucket& b = buckets_.back();
      const Tensor& first = params_[b.params.front()];
      int64_t cap = !options_.overlap ? INT64_MAX
                    : buckets_.size() == 1 ? options_.first_bucket_bytes
                                           : options_.bucket_cap_bytes;
      fits = first.dtype() == p.dtype() && first.device() == p.device() && b.group == group_of[k] &&
             b.numel * static_cast<int64_t>(p.element_size()) < cap;
    }
    if (!fits) {
      buckets_.push_back(ZeroBucket{});
      buckets_.back().group = group_of[k];
    }
    ZeroBucket& b = buckets_.back();
    where_[k] = {buckets_.size() - 1, b.params.size()};
    b.params.push_back(k);
    b.offsets.push_back(b.numel);
    b.numel += p.numel();
  }
  const int64_t world = pg_->size();
  for (ZeroBucket& b : buckets_) {
    const Tensor& p = params_[b.params.front()];
    TensorOptions o = TensorOptions().dtype(p.dtype()).device(p.device());
    b.shard_numel = (b.numel + world - 1) / world;
    b.flat = zeros({b.shard_numel * world}, o);  // the padding stays zero
    b.shard = zeros({b.shard_numel}, o);
    b.shard_grad = zeros({b.shard_numel}, o);
  }
}

std::vector<std::vector<std::string>> ZeroReducer::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const ZeroBucket& b : buckets_) {
    out.emplace_back();
    for (size_t i : b.params) out.back().push_back(names_[i]);
  }
  return out;
}

void ZeroReducer::refresh_shards() {
  NoGradGuard no_grad;
  const int64_t rank = pg_->rank();
  for (ZeroBucket& b : buckets_) {
    const int64_t lo = rank * b.shard_numel, hi = lo + b.shard_numel;
    b.shard.zero_();
    for (size_t s = 0; s < b.params.size(); ++s) {
      const Tensor& p = params_[b.params[s]];
      // The part of [offset, offset + numel) that falls in this rank's chunk [lo, hi).
      const int64_t from = std::max(lo, b.offsets[s]), to = std::min(hi, b.offsets[s] + p.numel());
      if (from >= to) continue;
      b.shard.narrow(0, from - lo, to - from).copy_(p.detach().reshape({-1}).narrow(0, from - b.offsets[s], to - from));
    }
  }
}

void ZeroReducer::gather_parameters() {
  NoGradGuard no_grad;
  for (ZeroBucket& b : buckets_) b.work = pg_->allgather_into_tensor(b.flat, b.shard);
  for (ZeroBucket& b : buckets_) {
    b.work->wait();
    b.work = nullptr;
    for (size_t s = 0; s < b.params.size(); ++s) {
      Tensor p = params_[b.params[s]];
      p.copy_(b.flat.narrow(0, b.offsets[s], p.numel()).view(p.sizes()));
    }
    b.flat.zero_();  // ready to collect gradients again, padding included
  }
}

void ZeroReducer::prepare_for_backward() {
  for (ZeroBucket& b : buckets_) {
    KILN_CHECK(b.work == nullptr, "ZeroRedundancyOptimizer: the previous backward did not finish its reduction");
    b.pending = static_cast<int>(b.params.size());
  }
  ready_.assign(params_.size(), false);
  next_launch_ = 0;
  launched_early_ = 0;
  callback_queued_ = false;
  armed_ = true;
}

void ZeroReducer::mark_ready(size_t i) {
  if (!armed_) return;  // no_sync: gradients accumulate in .grad until the next synchronised backward
  if (!callback_queued_) {
    std::weak_ptr<ZeroReducer> weak = weak_from_this();
    autograd::queue_callback([weak] {
      if (auto self = weak.lock()) self->finalize();
    });
    callback_queued_ = true;
  }
  KILN_ASSERT(i < params_.size(), "ZeroReducer: parameter index {} of {}", i, params_.size());
  KILN_CHECK(!ready_[i], "ZeroRedundancyOptimizer: parameter '{}' got its gradient twice in one backward", names_[i]);
  ready_[i] = true;
  auto [bi, slot] = where_[i];
  ZeroBucket& b = buckets_[bi];
  b.flat.narrow(0, b.offsets[slot], params_[i].numel()).copy_(params_[i].grad().reshape({-1}));
  if (--b.pending == 0 && options_.overlap) {
    size_t before = next_launch_;
    launch_ready_buckets();
    launched_early_ += static_cast<int>(next_launch_ - before);
  }
}

void ZeroReducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
    ZeroBucket& b = buckets_[next_launch_++];
    b.work = pg_->reduce_scatter_tensor(b.shard_grad, b.flat, ReduceOp::kAvg);
  }
}

void ZeroReducer::finalize() {
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
  }
  if (!unused.empty()) {
    for (ZeroBucket& b : buckets_)
      if (b.work) { b.work->wait(); b.work = nullptr; }
    fail("ZeroRedundancyOptimizer: parameters {} got no gradient in this backward; every rank must use every "
         "parameter, or construct DDP with find_unused_parameters = true", unused);
  }
  launch_ready_buckets();

  auto walk_done = Work::Clock::now();
  stats_ = ReducerStats{static_cast<int>(buckets_.size()), launched_early_, 0, 0};
  for (ZeroBucket& b : buckets_) {
    b.work->wait();
    stats_.comm_seconds += seconds(b.work->finished() - b.work->started());
    b.work = nullptr;
  }
  stats_.exposed_seconds = seconds(Work::Clock::now() - walk_done);

  NoGradGuard no_grad;
  // The shards carry the gradients now; the full-size local ones are dropped (their memory is
  // what stage 1 leaves to be saved by later stages, and a stale one must not leak into the
  // next step's accumulation).
  for (ZeroBucket& b : buckets_) {
    if (b.shard.grad().defined())
      b.shard.grad().copy_(b.shard_grad);
    else
      b.shard.set_grad(b.shard_grad.clone());
  }
  for (Tensor& p : params_) p.set_grad(Tensor());
}

}  // namespace kiln::dist
