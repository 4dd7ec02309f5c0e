#include "distributed/tensor_parallel/mappings.h"

#include <vector>

#include "autograd/node.h"
#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"

namespace kiln::dist::tp {
namespace {

int64_t wrap_dim(const Tensor& x, int64_t dim, const char* op) {
  const int64_t d = dim < 0 ? dim + x.dim() : dim;
  KILN_CHECK(d >= 0 && d < x.dim(), "{}: dim {} is out of range for a tensor of shape {}", op, dim, x.sizes());
  return d;
}

/// Records `out = forward(x)` with `backward` mapping out's gradient to x's, when the tape is on.
template <class Backward>
Tensor taped(const char* name, const Tensor& x, Tensor out, Backward backward) {
  if (!GradMode::is_enabled() || !x.requires_grad()) return out;
  autograd::record(name, {x}, {out}, [backward](const std::vector<Tensor>& grads) -> std::vector<Tensor> {
    if (!grads[0].defined()) return {Tensor()};
    return {backward(grads[0])};
  }, /*saves_nothing=*/true);
  return out;
}

}  // namespace

Tensor all_reduce_sum(const Tensor& x, ProcessGroup& group) {
  Tensor out = x.detach().clone();
  if (group.size() > 1) group.allreduce(out, ReduceOp::kSum)->wait();
  return out;
}

Tensor all_gather(const Tensor& x, ProcessGroup& group, int64_t dim) {
  const int64_t d = wrap_dim(x, dim, "tp::all_gather");
  if (group.size() == 1) return x.detach().clone();
  std::vector<Tensor> parts;
  for (int r = 0; r < group.size(); ++r) parts.push_back(empty_like(x));
  group.allgather(parts, x.detach().contiguous())->wait();
  return cat(parts, d);
}

Tensor rank_slice(const Tensor& x, const ProcessGroup& group, int64_t dim, const char* op) {
  const int64_t d = wrap_dim(x, dim, op);
  KILN_CHECK(x.size(d) % group.size() == 0, "{}: dim {} of size {} (shape {}) does not divide by the group's {} ranks",
             op, d, x.size(d), x.sizes(), group.size());
  const int64_t part = x.size(d) / group.size();
  return x.detach().narrow(d, group.rank() * part, part).contiguous().clone();
}

Tensor reduce_scatter(const Tensor& x, ProcessGroup& group, int64_t dim) {
  const int64_t d = wrap_dim(x, dim, "tp::reduce_scatter");
  KILN_CHECK(x.size(d) % group.size() == 0,
             "tp::reduce_scatter: dim {} of size {} (shape {}) does not divide by the group's {} ranks", d, x.size(d),
             x.sizes(), group.size());
  if (group.size() == 1) return x.detach().clone();
  std::vector<Tensor> chunks;
  for (const Tensor& c : x.detach().chunk(group.size(), d)) chunks.push_back(c.contiguous());
  Tensor out = empty_like(chunks[0]);
  group.reduce_scatter(out, chunks, ReduceOp::kSum)->wait();
  return out;
}

Tensor copy_to_group(const Tensor& x, const GroupPtr& group) {
  return taped("CopyToTensorParallelBackward", x, x.detach(),
               [group](const Tensor& g) { return all_reduce_sum(g, *group); });
}

Tensor reduce_from_group(const Tensor& x, const GroupPtr& group) {
  return taped("ReduceFromTensorParallelBackward", x, all_reduce_sum(x, *group), [](const Tensor& g) { return g; });
}

Tensor gather_from_group(const Tensor& x, const GroupPtr& group, int64_t dim) {
  const int64_t d = wrap_dim(x, dim, "tp::gather_from_group");
  return taped("GatherFromTensorParallelBackward", x, all_gather(x, *group, d),
               [group, d](const Tensor& g) { return rank_slice(g, *group, d, "tp::gather_from_group backward"); });
}

Tensor scatter_to_group(const Tensor& x, const GroupPtr& group, int64_t dim) {
  const int64_t d = wrap_dim(x, dim, "tp::scatter_to_group");
  return taped("ScatterToTensorParallelBackward", x, rank_slice(x, *group, d, "tp::scatter_to_group"),
               [group, d](const Tensor& g) { return all_gather(g, *group, d); });
}

Tensor reduce_scatter_to_group(const Tensor& x, const GroupPtr& group, int64_t dim) {
  const int64_t d = wrap_dim(x, dim, "tp::reduce_scatter_to_group");
  return taped("ReduceScatterToSequenceParallelBackward", x, reduce_scatter(x, *group, d),
               [group, d](const Tensor& g) { return all_gather(g, *group, d); });
}

Tensor gather_from_sequence(const Tensor& x, const GroupPtr& group, int64_t dim) {
  const int64_t d = wrap_dim(x, dim, "tp::gather_from_sequence");
  return taped("GatherFromSequenceParallelBackward", x, all_gather(x, *group, d),
               [group, d](const Tensor& g) { return reduce_scatter(g, *group, d); });
}

}  // namespace kiln::dist::tp
