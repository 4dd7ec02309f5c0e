// ZeRO-1's reduce-scattering reducer; see zero_reducer.h. The hook/launch/finalize flow is
// bucketed_reducer.cc's (gradients entering the buckets as views), with an in-place
// reduce_scatter_tensor as the collective and views of the buckets as the shards' gradients.
#include "distributed/data_parallel/zero_reducer.h"

#include <algorithm>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"

namespace kiln::dist {

std::shared_ptr<ZeroReducer> ZeroReducer::create(std::vector<std::string> names, std::vector<Tensor> params,
                                                 std::vector<int> group_of, std::shared_ptr<ProcessGroup> pg,
                                                 ReducerOptions options) {
  KILN_CHECK(pg != nullptr, "ZeroRedundancyOptimizer: the process group is null");
  KILN_CHECK(!params.empty(), "ZeroRedundancyOptimizer: no parameter requires a gradient");
  const int world = pg->size();
  options.gradient_as_bucket_view = true;  // the whole point of stage 1: no second full gradient
  std::shared_ptr<ZeroReducer> r(
      new ZeroReducer(std::move(names), std::move(params), group_of, std::move(pg), options, world));
  register_hooks(r);
  return r;
}

ZeroReducer::ZeroReducer(std::vector<std::string> names, std::vector<Tensor> params, const std::vector<int>& group_of,
                         std::shared_ptr<ProcessGroup> pg, ReducerOptions options, int world)
    : BucketedReducer("ZeroRedundancyOptimizer", std::move(names), std::move(params), group_of, std::move(pg),
                      options, world) {
  for (const ReducerBucket& b : buckets_) {
    ZeroShard s;
    s.numel = b.flat.numel() / world;
    TensorOptions o = TensorOptions().dtype(b.flat.dtype()).device(b.flat.device());
    s.shard = zeros({s.numel}, o);
    shards_.push_back(std::move(s));
  }
  refresh_shards();
}

void ZeroReducer::refresh_shards() {
  NoGradGuard no_grad;
  const int64_t rank = pg_->rank();
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    const ReducerBucket& b = buckets_[bi];
    Tensor& shard = shards_[bi].shard;
    const int64_t lo = rank * shards_[bi].numel, hi = lo + shards_[bi].numel;
    shard.zero_();
    for (size_t s = 0; s < b.params.size(); ++s) {
      const Tensor& p = params_[b.params[s]];
      // The part of [offset, offset + numel) that falls in this rank's chunk [lo, hi).
      const int64_t from = std::max(lo, b.offsets[s]), to = std::min(hi, b.offsets[s] + p.numel());
      if (from >= to) continue;
      shard.narrow(0, from - lo, to - from).copy_(p.detach().reshape({-1}).narrow(0, from - b.offsets[s], to - from));
    }
  }
}

void ZeroReducer::gather_parameters() {
  NoGradGuard no_grad;
  std::vector<WorkPtr> work;
  for (size_t bi = 0; bi < buckets_.size(); ++bi)
    work.push_back(pg_->allgather_into_tensor(buckets_[bi].flat, shards_[bi].shard));
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    ReducerBucket& b = buckets_[bi];
    work[bi]->wait();
    for (size_t s = 0; s < b.params.size(); ++s) {
      Tensor p = params_[b.params[s]];
      p.copy_(b.flat.narrow(0, b.offsets[s], p.numel()).view(p.sizes()));
    }
    b.flat.zero_();  // ready to collect gradients again, padding included
    for (size_t i : b.params) params_[i].set_grad(bucket_view(i));
  }
}

Tensor ZeroReducer::grad_chunk(size_t b) const {
  const int64_t n = shards_[b].numel;
  return buckets_[b].flat.narrow(0, pg_->rank() * n, n);
}

WorkPtr ZeroReducer::launch(size_t b) {
  return pg_->reduce_scatter_tensor(grad_chunk(b), buckets_[b].flat, ReduceOp::kAvg);
}

void ZeroReducer::finish() {
  for (size_t b = 0; b < shards_.size(); ++b) {
    Tensor chunk = grad_chunk(b);
    const Tensor& g = shards_[b].shard.grad();
    if (!g.defined() || g.data_ptr() != chunk.data_ptr()) shards_[b].shard.set_grad(chunk);
  }
  // Outside this rank's chunk the buckets hold local or partly reduced gradients, which no one may
  // read as the parameters' gradients (nor accumulate into): the views are dropped until
  // gather_parameters() zeroes the buckets.
  for (Tensor& p : params_) p.set_grad(Tensor());
}

}  // namespace kiln::dist
