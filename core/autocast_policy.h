// Autocast's policy: which ops run in the lower precision (f16/bf16), which in f32, and which
// promote their inputs to one dtype while amp::AutocastGuard is active. The elementwise kinds say
// it in the `amp` column of their own rows (core/elementwise_ops.h), so a new unary op is pinned
// to f32 by its row; the table below holds every other op. The public entry points of the listed
// ops (in core/ops and nn/functional) consult it through core/autocast.h; every op listed in
// neither follows the dtypes of its inputs. It lives in core so that core and nn can both reach
// it; amp/ only switches it on.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace kiln {

enum class AutocastClass : int8_t {
  /// Floating inputs (other than f64) are cast to the autocast dtype. GEMM-bound ops: that is
  /// where f16/bf16 pays on a GPU, and their kernels accumulate in f32, so the result stays accurate.
  lower,
  /// f16/bf16 inputs are cast up to f32: ops whose range (exp, pow) or accumulated rounding
  /// (reductions, normalisation, softmax, losses) the 16-bit formats cannot hold.
  fp32,
  /// Floating inputs are cast to the widest floating dtype among them (ops that insist on one
  /// dtype). cat, stack, where and the elementwise binary ops promote anyway and need no entry.
  promote,
};

// (op, class) for the ops outside the elementwise registry. Names are the public functions'
// (core/ops.h, core/conv.h, nn/functional.h).
#define KILN_AUTOCAST_POLICY(_)                                                                  \
  _(matmul, lower) _(mm, lower) _(bmm, lower) _(linear, lower) _(conv2d, lower)                  \
  _(sum, fp32) _(mean, fp32) _(prod, fp32) _(var, fp32) _(std, fp32) _(logsumexp, fp32)           \
  _(softmax, fp32) _(log_softmax, fp32)                                                           \
  _(layer_norm, fp32) _(batch_norm, fp32)                                                         \
  _(cross_entropy, fp32) _(nll_loss, fp32) _(mse_loss, fp32) _(l1_loss, fp32)                     \
  _(binary_cross_entropy_with_logits, fp32)                                                       \
  _(binary_cross_entropy, fp32) _(kl_div, fp32) _(smooth_l1_loss, fp32) _(huber_loss, fp32)       \
  _(group_norm, fp32) _(rms_norm, fp32) _(normalize, fp32) _(cosine_similarity, fp32)             \
  _(scatter_add, promote) _(index_add, promote)

enum class AutocastOp : int16_t {
#define KILN_AUTOCAST_ENUM_(NAME, CLASS) NAME,
  KILN_AUTOCAST_POLICY(KILN_AUTOCAST_ENUM_)
#undef KILN_AUTOCAST_ENUM_
};

/// The class the table gives `op`.
constexpr AutocastClass autocast_class(AutocastOp op) {
  constexpr AutocastClass classes[] = {
#define KILN_AUTOCAST_CLASS_(NAME, CLASS) AutocastClass::CLASS,
      KILN_AUTOCAST_POLICY(KILN_AUTOCAST_CLASS_)
#undef KILN_AUTOCAST_CLASS_
  };
  return classes[static_cast<int>(op)];
}

/// "matmul", "softmax", ...
constexpr std::string_view autocast_op_name(AutocastOp op) {
  constexpr std::string_view names[] = {
#define KILN_AUTOCAST_NAME_(NAME, CLASS) #NAME,
      KILN_AUTOCAST_POLICY(KILN_AUTOCAST_NAME_)
#undef KILN_AUTOCAST_NAME_
  };
  return names[static_cast<int>(op)];
}

constexpr std::string_view autocast_class_name(AutocastClass c) {
  return c == AutocastClass::lower ? "lower" : c == AutocastClass::fp32 ? "fp32" : "promote";
}

/// One op autocast acts on: its name (an elementwise kind's is its row's, e.g. "pow_scalar"
/// for pow(tensor, number) and "pow" for pow(tensor, tensor)) and its class.
struct AutocastEntry {
  std::string_view name;
  AutocastClass cls;
};

/// Every op autocast acts on, for documentation and tests: the elementwise kinds whose `amp`
/// column is fp32 (in table order, unary then binary), then the table above in order.
std::vector<AutocastEntry> autocast_policy();

}  // namespace kiln
