// The fused cross-entropy primitive's forward with the statistics its backward reads
// (core/ops/cross_entropy.cc). Not recorded by autograd: autograd/functions/cross_entropy.cc
// calls it and saves what it returns.
#pragma once

#include <tuple>

#include "core/tensor.h"

namespace kiln {

/// op::cross_entropy's per-row loss [N] and the logsumexp of each row [N] (logits' dtype).
std::tuple<Tensor, Tensor> cross_entropy_with_lse(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                                  double label_smoothing);

}  // namespace kiln
