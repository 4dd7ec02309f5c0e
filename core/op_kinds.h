// Typed parameters of the elementwise and reduction op families (never untyped ints). The
// unary and binary kinds come from the rows of core/elementwise_ops.h.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/elementwise_ops.h"

namespace kiln {

struct UnaryOp {
  UnaryKind kind;
  double a = 0;  ///< the kind's first parameter (KILN_UNARY_OPS names it per row)
  double b = 0;  ///< the second
};

enum class CompareKind : int8_t { eq, ne, lt, le, gt, ge };

enum class ReduceKind : int8_t { sum, mean, max, min, prod };

/// conv2d's geometry (PyTorch's Conv2d arguments): per-dim (height, width) pairs.
struct Conv2dParams {
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
};

/// The fused attention primitive's parameters (op::attention, core/ops/attention.h).
struct AttentionParams {
  double scale = 1.0;
  /// Query i attends to keys j <= i (top-left aligned, as PyTorch's is_causal).
  bool causal = false;
  /// Probability of zeroing an attention probability (kept ones are scaled by 1 / (1 - p)).
  double dropout_p = 0.0;
  /// Philox key and first counter of the dropout mask: element e of the [B, H, Tq, Tk]
  /// probabilities is kept when word e % 4 of philox(seed, offset + e / 4) >= p * 2^32.
  uint64_t seed = 0;
  uint64_t offset = 0;
};

/// max_pool2d / avg_pool2d geometry. Padding is implicit -inf (max) or zeros (avg);
/// count_include_pad only affects avg_pool2d.
struct Pool2dParams {
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};  // max_pool2d only: window elements dilation apart
  bool ceil_mode = false;
  bool count_include_pad = true;
};

/// One fused SGD step's constants, shared by every tensor of the call (torch.optim.SGD's).
struct SGDStepParams {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
};

/// One fused Adam/AdamW step's constants (torch.optim.Adam's), for tensors at the same step t.
struct AdamStepParams {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool amsgrad = false, maximize = false;
  bool decoupled = false;        // AdamW: p *= 1 - lr * weight_decay instead of grad += wd * p
  double step_size = 0;          // lr / (1 - beta1^t)
  double bias_corr2_sqrt = 0;    // sqrt(1 - beta2^t)
};

std::string_view kind_name(UnaryKind k);
std::string_view kind_name(BinaryKind k);
std::string_view kind_name(CompareKind k);
std::string_view kind_name(ReduceKind k);

}  // namespace kiln
