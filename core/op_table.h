// The differentiable primitives, declared once. Every other differentiable op in core/ops.h is
// composed of these, so its gradient comes for free. Each is defined (with its forward) in the
// core/ops/*.cc file of its family; autograd/ attaches the backward formulas.
#pragma once

#include "core/op.h"
#include "core/op_kinds.h"

namespace kiln::op {

#define KILN_OP_LIST(_)                                                                      \
  _(unary, Tensor(const UnaryOp&, const Tensor&))                                            \
  _(binary, Tensor(BinaryKind, const Tensor&, const Tensor&))                                \
  _(where, Tensor(const Tensor& cond, const Tensor& a, const Tensor& b))                     \
  _(to_dtype, Tensor(const Tensor&, DType))                                                  \
  _(to_device, Tensor(const Tensor&, Device))                                                \
  _(clone, Tensor(const Tensor&))                                                            \
  _(reduce, Tensor(ReduceKind, const Tensor&, const IntList& dims, bool keepdim))            \
  _(softmax, Tensor(const Tensor&, int64_t dim, bool log))                                   \
  _(bmm, Tensor(const Tensor&, const Tensor&))                                               \
  /* y = x @ w^T + bias: x [*, in], w [out, in], bias [out] or undefined */                  \
  _(linear, Tensor(const Tensor& x, const Tensor& w, const Tensor& bias))                    \
  _(view, Tensor(const Tensor&, const Shape&))                                               \
  _(permute, Tensor(const Tensor&, const IntList&))                                          \
  _(slice, Tensor(const Tensor&, int64_t dim, int64_t start, int64_t end, int64_t step))     \
  _(expand, Tensor(const Tensor&, const Shape&))                                             \
  _(cat, Tensor(const std::vector<Tensor>&, int64_t dim))                                    \
  /* views of consecutive pieces of `dim` (sizes checked by split_with_sizes); one backward     \
     node joins their gradients */                                                             \
  _(split_with_sizes, std::vector<Tensor>(const Tensor&, const IntList& sizes, int64_t dim))  \
  _(index_select, Tensor(const Tensor&, int64_t dim, const Tensor& index))                   \
  _(gather, Tensor(const Tensor&, int64_t dim, const Tensor& index))                         \
  _(scatter_add, Tensor(const Tensor&, int64_t dim, const Tensor& index, const Tensor& src))  \
  _(index_add, Tensor(const Tensor&, int64_t dim, const Tensor& index, const Tensor& src))    \
  /* rows of weight [num, dim] at integer indices [*] -> [*, dim]; padding_idx (-1: none)    \
     gets no gradient */                                                                     \
  _(embedding, Tensor(const Tensor& weight, const Tensor& indices, int64_t padding_idx))      \
  /* bias may be undefined */                                                                \
  _(conv2d, Tensor(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams&)) \
  _(max_pool2d, Tensor(const Tensor&, const Pool2dParams&))                                  \
  _(avg_pool2d, Tensor(const Tensor&, const Pool2dParams&))                                  \
  /* per-row loss [N] of logits [N, C] against i64 target [N] (reduction is composed on top) */ \
  _(cross_entropy, Tensor(const Tensor& logits, const Tensor& target, int64_t ignore_index,    \
                          double label_smoothing))                                             \
  /* over the last `normalized_dims` dims; weight/bias of that shape or undefined */           \
  _(layer_norm, Tensor(const Tensor& x, const Tensor& weight, const Tensor& bias,              \
                       int64_t normalized_dims, double eps))                                   \
  /* training mode (batch statistics); running stats updated in place when defined */          \
  _(batch_norm, Tensor(const Tensor& x, const Tensor& weight, const Tensor& bias,              \
                       Tensor running_mean, Tensor running_var, double momentum, double eps))  \
  /* fused softmax(q k^T * scale + mask) v over q [B..., H, Tq, D], k/v [B..., H, Tk, D/Dv];  \
     mask undefined, bool or floating, broadcastable (core/ops/attention.h) */          \
  _(attention, Tensor(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,   \
                      const AttentionParams& p))

#define KILN_DECLARE_OP_(NAME, SIG) extern Op<SIG> NAME;
KILN_OP_LIST(KILN_DECLARE_OP_)
#undef KILN_DECLARE_OP_

}  // namespace kiln::op

/// In a family's .cc: KILN_DEFINE_OP(binary, binary_forward) defines op::binary.
#define KILN_DEFINE_OP(NAME, FORWARD) \
  namespace kiln::op {                \
  constinit decltype(NAME) NAME{#NAME, FORWARD}; \
  }
