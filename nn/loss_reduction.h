// Shared by the functional losses and norms (nn/functional.cc, nn/losses.cc, nn/normalization.cc):
// reduction as PyTorch's `reduction=` argument, the autocast cast of an input, logits as class rows.
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

/// Logits [N, C, d1, ...] as rows [N * d1 * ..., C] (class dim last); [N, C] as it is.
inline Tensor class_rows(const Tensor& t) {
  if (t.dim() <= 2) return t;
  IntList order{0};
  for (int64_t d = 2; d < t.dim(); ++d) order.push_back(d);
  order.push_back(1);
  return t.permute(order).reshape({-1, t.size(1)});
}

inline void check_target(const char* op, const Tensor& input, const Tensor& target) {
  KILN_CHECK(input.sizes() == target.sizes(), "{}: input shape {} and target shape {} differ", op, input.sizes(),
             target.sizes());
}

}  // namespace kiln::nn::functional::detail
