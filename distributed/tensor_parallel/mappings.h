// The differentiable collectives tensor parallelism is built from (Megatron-LM's mappings): each
// is one collective in forward and its conjugate in backward, recorded on the autograd tape, so a
// model split across a group trains with the same gradients as the whole model in one process.
//
//   copy_to_group        forward: identity         backward: all-reduce (sum)   "f" before a column-parallel layer
//   reduce_from_group    forward: all-reduce (sum) backward: identity          "g" after a row-parallel layer
//   gather_from_group    forward: all-gather dim   backward: this rank's slice
//   scatter_to_group     forward: this rank's slice backward: all-gather dim
//   reduce_scatter_to_group  forward: reduce-scatter dim  backward: all-gather dim   (sequence parallel)
//   gather_from_sequence     forward: all-gather dim      backward: reduce-scatter dim
//
// Slices go in rank order; `dim` must divide by the group's size where a tensor is split.
#pragma once

#include <cstdint>
#include <memory>

#include "core/tensor.h"
#include "distributed/backend/process_group.h"

namespace kiln::dist::tp {

using GroupPtr = std::shared_ptr<ProcessGroup>;

Tensor copy_to_group(const Tensor& x, const GroupPtr& group);
Tensor reduce_from_group(const Tensor& x, const GroupPtr& group);
Tensor gather_from_group(const Tensor& x, const GroupPtr& group, int64_t dim = -1);
Tensor scatter_to_group(const Tensor& x, const GroupPtr& group, int64_t dim = -1);
Tensor reduce_scatter_to_group(const Tensor& x, const GroupPtr& group, int64_t dim);
Tensor gather_from_sequence(const Tensor& x, const GroupPtr& group, int64_t dim);

// The plain collectives underneath (no tape), for code that handles gradients itself.

/// Sum over the group; a new tensor (x is left as it was).
Tensor all_reduce_sum(const Tensor& x, ProcessGroup& group);
/// The ranks' tensors side by side along `dim`, in rank order.
Tensor all_gather(const Tensor& x, ProcessGroup& group, int64_t dim);
/// This rank's 1/size slice along `dim` of the sum over the group.
Tensor reduce_scatter(const Tensor& x, ProcessGroup& group, int64_t dim);
/// This rank's 1/size slice along `dim` (contiguous copy). Throws naming `op` and the sizes when
/// `dim` does not divide by the group's size.
Tensor rank_slice(const Tensor& x, const ProcessGroup& group, int64_t dim, const char* op);

}  // namespace kiln::dist::tp
