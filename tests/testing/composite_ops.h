// Fused ops written out from primitive ops, as references the fused kernels are checked against
// (values in f64, and gradients through the primitives' own backward).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace kiln::test {

/// Cross-entropy of [N, C, ...] logits against class indices, per element (no reduction): the
/// label-smoothed NLL of log_softmax over dim 1, 0 where the target is `ignore_index`.
inline Tensor composite_cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                      double smoothing) {
  Tensor logp = logits.log_softmax(1);
  Tensor valid = target != Scalar(ignore_index);
  Tensor safe = where(valid, target, Scalar(int64_t{0}));
  Tensor nll = -logp.gather(1, safe.unsqueeze(1)).squeeze(1);
  return where(valid, nll * (1.0 - smoothing) + (-logp.mean({1})) * smoothing, 0.0);
}

}  // namespace kiln::test
