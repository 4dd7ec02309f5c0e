// Shared by the functional losses and norms (nn/functional*.cc, nn/losses.cc): reduction as
// PyTorch's `reduction=` argument, and the autocast cast of an input.
#pragma once

#include "core/autocast.h"
#include "nn/functional.h"

namespace kiln::nn::functional::detail {

inline Tensor reduce(const Tensor& loss, Reduction r) {
  switch (r) {
    case Reduction::none: return loss;
    case Reduction::sum: return loss.sum();
    case Reduction::mean: return loss.mean();
    case Reduction::batchmean: return loss.sum() / static_cast<double>(loss.dim() > 0 ? loss.size(0) : 1);
  }
  return loss;
}

/// `t` as the autocast policy wants it for `op` (itself with autocast off).
inline Tensor policy(AutocastOp op, const Tensor& t) { return autocast::cast_input(op, t); }

inline void check_target(const char* op, const Tensor& input, const Tensor& target) {
  KILN_CHECK(input.sizes() == target.sizes(), "{}: input shape {} and target shape {} differ", op, input.sizes(),
             target.sizes());
}

}  // namespace kiln::nn::functional::detail
