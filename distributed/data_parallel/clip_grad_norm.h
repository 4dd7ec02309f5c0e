// Gradient-norm clipping when one model's parameters are spread over the ranks of a group
// (pipeline stages, or any model-parallel split): the norm is taken over all ranks' gradients
// together, so every rank scales by the same coefficient that one process holding the whole
// model would use.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "distributed/backend/process_group.h"

namespace kiln::dist {

/// optim::clip_grad_norm_ over the union of every rank's `params` (each rank passes its own):
/// the per-rank sums of |g|^p (the max for norm_type = infinity) are all-reduced, and every
/// gradient is multiplied by max_norm / (total + 1e-6) when that is below 1. Returns the total
/// norm, the same on every rank. A collective: every rank of `pg` must call it.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, ProcessGroup& pg, double norm_type = 2.0);

}  // namespace kiln::dist
