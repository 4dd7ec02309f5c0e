// The device-level kernel table, declared once. Each backend registers what it has with
// KILN_REGISTER_KERNEL(name, DeviceType::X, fn). Conventions every kernel follows:
// - `out` is allocated by the caller with its final shape and dtype; kernels never allocate it.
// - inputs already have `out`'s shape where the op is elementwise (broadcast by zero strides)
//   and the dtype the op computes in; any strides are allowed unless the comment says otherwise.
// - all tensors are on the same device.
// What these comments promise is checked once, by the op in core/ops (or the layer that calls the
// slot: autograd, optim, amp), before the slot runs; kernels trust it and do not check again. A
// backend checks only its own limits, naming them (CUDA: at most kern::kMaxDims non-mergeable
// dims, attention head dims up to 128, cuDNN's batch-norm batch size, eps floor and 32-bit
// indexing, cuBLAS's int sizes, no bool atomic adds).
#pragma once

#include "core/generator.h"
#include "core/op.h"
#include "core/op_kinds.h"

namespace kiln::kernels {

#define KILN_KERNEL_LIST(_)                                                                      \
  /* out[...] = value */                                                                         \
  _(fill, void(Tensor& out, const Scalar& value))                                                \
  /* out = src converted to out's dtype; src has out's shape (maybe zero strides) */             \
  _(copy, void(Tensor& out, const Tensor& src))                                                  \
  /* out and src on different devices, same shape and dtype, src contiguous; registered by    \
     the non-CPU backend (dispatched on whichever side is not the CPU) */                      \
  _(copy_across_devices, void(Tensor& out, const Tensor& src))                                   \
  /* out[i] = start + i * step, out contiguous */                                                \
  _(arange, void(Tensor& out, double start, double step))                                        \
  /* out = op(x) in x's dtype, which the op's dtypes column allows (core/elementwise_ops.h) */   \
  _(unary, void(const UnaryOp& op, Tensor& out, const Tensor& x))                                \
  /* grad_x = the row's grad column at (grad_y, saved); one floating dtype, one shape */          \
  _(unary_backward, void(const UnaryOp& op, Tensor& grad_x, const Tensor& grad_y, const Tensor& saved)) \
  /* out = kind(a, b) in out's dtype, which the kind's dtypes column allows */                     \
  _(binary, void(BinaryKind kind, Tensor& out, const Tensor& a, const Tensor& b))                \
  /* out is bool, a and b share a dtype */                                                       \
  _(compare, void(CompareKind kind, Tensor& out, const Tensor& a, const Tensor& b))              \
  /* cond is bool */                                                                             \
  _(where, void(Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b))              \
  /* out has x's shape with `dims` reduced to size 1 */                                          \
  _(reduce, void(ReduceKind kind, Tensor& out, const Tensor& x, const IntList& dims))            \
  /* out (i64) has x's shape with `dim` reduced to 1; kind is max or min; first index wins */     \
  _(arg_reduce, void(ReduceKind kind, Tensor& out, const Tensor& x, int64_t dim))                \
  /* stable sort order of each row of a contiguous [rows, n] x into i64 [rows, n]; NaN sorts as \
     the largest value */                                                                     \
  _(argsort, void(Tensor& indices, const Tensor& x, bool descending))                          \
  _(softmax, void(Tensor& out, const Tensor& x, int64_t dim, bool log))                          \
  /* grad_x from grad_y and the forward output y */                                              \
  _(softmax_backward, void(Tensor& grad_x, const Tensor& grad_y, const Tensor& y, int64_t dim, bool log)) \
  /* out[b] = a[b] @ b[b]; 3-D operands, same dtype */                                           \
  _(bmm, void(Tensor& out, const Tensor& a, const Tensor& b))                                    \
  /* out [M, N] = x [M, K] @ w [N, K]^T (+ bias [N] when defined), all contiguous, one floating \
     dtype: a GEMM with the bias added in its epilogue. Optional: linear uses bmm + add on a    \
     device without it */                                                                       \
  _(linear, void(Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias))            \
  /* index is i64 and 1-D */                                                                     \
  _(index_select, void(Tensor& out, const Tensor& x, int64_t dim, const Tensor& index))          \
  /* out.index_select(dim, index) += src, in place */                                            \
  _(index_add, void(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src))           \
  /* out has index's shape */                                                                    \
  _(gather, void(Tensor& out, const Tensor& x, int64_t dim, const Tensor& index))                \
  /* out[index[i][j]][j] += src[i][j] (for dim 0), in place */                                   \
  _(scatter_add, void(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src))         \
  /* random fills: out contiguous and non-empty-checked by core/ops/random.cc and creation.cc:    \
     uniform/normal floating with low <= high, std >= 0; randint's range fits out's dtype;      \
     0 <= p <= 1 */                                                                              \
  _(uniform, void(Tensor& out, Generator& gen, double low, double high))                         \
  _(normal, void(Tensor& out, Generator& gen, double mean, double std))                          \
  /* integers in [low, high) */                                                                  \
  _(randint, void(Tensor& out, Generator& gen, int64_t low, int64_t high))                       \
  /* out = 1 with probability p, else 0 */                                                       \
  _(bernoulli, void(Tensor& out, Generator& gen, double p))                                     \
  /* out[N, Cout, OH, OW] = conv(x[N, Cin, H, W], w[Cout, Cin/groups, KH, KW]) (+ bias[Cout]    \
     when defined); x, w, bias contiguous, one floating dtype */                                \
  _(conv2d, void(Tensor& out, const Tensor& x, const Tensor& w, const Tensor& bias,            \
                 const Conv2dParams& p))                                                        \
  /* writes (=, not +=) each of grad_x, grad_w, grad_bias that is defined (pre-allocated with   \
     the shape of x, w, [Cout]); grad_out, x, w contiguous, one dtype. x's values are read only \
     for grad_w and w's only for grad_x: otherwise any tensor of their shape will do */          \
  _(conv2d_backward, void(Tensor& grad_x, Tensor& grad_w, Tensor& grad_bias,                   \
                          const Tensor& grad_out, const Tensor& x, const Tensor& w,             \
                          const Conv2dParams& p))                                               \
  /* out and indices (i64: flat h * W + w within each input plane) [N, C, OH, OW]; x         \
     contiguous NCHW */                                                                         \
  _(max_pool2d, void(Tensor& out, Tensor& indices, const Tensor& x, const Pool2dParams& p))    \
  /* grad_x (=) from grad_out and the forward's indices; all contiguous */                     \
  _(max_pool2d_backward, void(Tensor& grad_x, const Tensor& grad_out, const Tensor& indices))  \
  /* out [N, C, OH, OW]; x contiguous NCHW */                                                   \
  _(avg_pool2d, void(Tensor& out, const Tensor& x, const Pool2dParams& p))                     \
  /* grad_x (=) from grad_out; both contiguous */                                              \
  _(avg_pool2d_backward, void(Tensor& grad_x, const Tensor& grad_out, const Pool2dParams& p))  \
  /* mixed precision's gradient unscaling: grad *= inv_scale in place, and found_inf (f32,       \
     0-dim, on grad's device) is set to 1 if any element of grad is inf or NaN (left alone      \
     otherwise); grad contiguous and floating */                                               \
  _(non_finite_check_and_unscale, void(Tensor& grad, Tensor& found_inf, double inv_scale))     \
  /* fused cross-entropy over rows: logits [N, C] contiguous floating, target [N] i64; writes   \
     loss [N] (0 where target == ignore_index) and lse [N] (logsumexp of each row), both in     \
     logits' dtype (f16/bf16 accumulate in f32). A target outside [0, C) that is not            \
     ignore_index throws naming it */                                                           \
  _(cross_entropy, void(Tensor& loss, Tensor& lse, const Tensor& logits, const Tensor& target, \
                        int64_t ignore_index, double label_smoothing))                          \
  /* grad_logits (=) [N, C] = grad_loss[i] * (softmax - (1 - s) * onehot(target) - s / C),     \
     zero rows where target == ignore_index; from the forward's lse, never storing softmax */   \
  _(cross_entropy_backward, void(Tensor& grad_logits, const Tensor& grad_loss,                 \
                                 const Tensor& logits, const Tensor& lse, const Tensor& target,\
                                 int64_t ignore_index, double label_smoothing))                 \
  /* layer norm over the last dim of x viewed as [M, N] (contiguous): out [M, N], mean and rstd \
     [M] (f32 for f16/bf16 x, else x's dtype); weight and bias [N] or undefined */             \
  _(layer_norm, void(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& x,                 \
                     const Tensor& weight, const Tensor& bias, double eps))                    \
  /* writes (=) each of grad_x [M, N], grad_weight [N], grad_bias [N] that is defined */       \
  _(layer_norm_backward, void(Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias,          \
                              const Tensor& grad_out, const Tensor& x, const Tensor& mean,     \
                              const Tensor& rstd, const Tensor& weight))                        \
  /* training-mode batch norm over x [N, C, *] contiguous: out like x; save_mean, save_invstd \
     [C] f32 (f64 for f64 x); weight/bias [C] or undefined; running_mean/var [C] updated in    \
     place with momentum (unbiased variance) when defined */                                    \
  _(batch_norm, void(Tensor& out, Tensor& save_mean, Tensor& save_invstd, const Tensor& x,     \
                     const Tensor& weight, const Tensor& bias, Tensor& running_mean,           \
                     Tensor& running_var, double momentum, double eps))                        \
  /* training-mode backward; writes (=) each of grad_x, grad_weight, grad_bias that is defined  \
     (weight undefined means 1) */                                                              \
  _(batch_norm_backward, void(Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias,          \
                              const Tensor& grad_out, const Tensor& x, const Tensor& weight,   \
                              const Tensor& save_mean, const Tensor& save_invstd))             \
  /* one SGD step over a list of parameters on one device with one dtype; params, grads and    \
     bufs contiguous and pairwise the same shape; bufs empty when momentum == 0; `first` seeds   \
     the buffers with the gradient (a parameter's first step) */                                \
  _(sgd_step, void(std::vector<Tensor>& params, const std::vector<Tensor>& grads,              \
                   std::vector<Tensor>& bufs, const SGDStepParams& s, bool first))              \
  /* one Adam/AdamW step over a list of parameters at the same step t; as sgd_step;            \
     max_exp_avg_sqs empty unless amsgrad */                                                    \
  _(adam_step, void(std::vector<Tensor>& params, const std::vector<Tensor>& grads,             \
                    std::vector<Tensor>& exp_avgs, std::vector<Tensor>& exp_avg_sqs,           \
                    std::vector<Tensor>& max_exp_avg_sqs, const AdamStepParams& s))            \
  /* fused attention: q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, Dv], out [B, H, Tq, Dv]   \
     in one floating dtype, each with attention_4d's strides (last dim's 1, rows not           \
     overlapping; any others); mask undefined or [B, H, Tq, Tk] with any strides, bool or     \
     q's dtype; lse [B, H, Tq] contiguous, f64 for f64 q else f32 */                          \
  _(attention_forward, void(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,         \
                            const Tensor& v, const Tensor& mask, const AttentionParams& p))    \
  /* writes (=) grad_q, grad_k, grad_v (shapes and dtype of q, k, v; attention_4d's strides), \
     and when defined grad_mask ([B, H, Tq, Tk] contiguous, q's dtype: the additive mask's     \
     gradient) from the forward's out and lse */                                               \
  _(attention_backward, void(Tensor& grad_q, Tensor& grad_k, Tensor& grad_v, Tensor& grad_mask, \
                             const Tensor& grad_out, const Tensor& q, const Tensor& k,         \
                             const Tensor& v, const Tensor& mask, const Tensor& out,           \
                             const Tensor& lse, const AttentionParams& p))

#define KILN_DECLARE_KERNEL_(NAME, SIG) extern KernelStub<SIG> NAME;
KILN_KERNEL_LIST(KILN_DECLARE_KERNEL_)
#undef KILN_DECLARE_KERNEL_

}  // namespace kiln::kernels
