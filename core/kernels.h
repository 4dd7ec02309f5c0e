// The device-level kernel table, declared once. Each backend registers what it has with
// KILN_REGISTER_KERNEL(name, DeviceType::X, fn). Conventions every kernel follows:
// - `out` is allocated by the caller with its final shape and dtype; kernels never allocate it.
// - inputs already have `out`'s shape where the op is elementwise (broadcast by zero strides)
//   and the dtype the op computes in; any strides are allowed unless the comment says otherwise.
// - all tensors are on the same device.
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
  _(unary, void(const UnaryOp& op, Tensor& out, const Tensor& x))                                \
  _(binary, void(BinaryKind kind, Tensor& out, const Tensor& a, const Tensor& b))                \
  /* out is bool, a and b share a dtype */                                                       \
  _(compare, void(CompareKind kind, Tensor& out, const Tensor& a, const Tensor& b))              \
  /* cond is bool */                                                                             \
  _(where, void(Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b))              \
  /* out has x's shape with `dims` reduced to size 1 */                                          \
  _(reduce, void(ReduceKind kind, Tensor& out, const Tensor& x, const IntList& dims))            \
  /* out (i64) has x's shape with `dim` reduced to 1; kind is max or min; first index wins */     \
  _(arg_reduce, void(ReduceKind kind, Tensor& out, const Tensor& x, int64_t dim))                \
  _(softmax, void(Tensor& out, const Tensor& x, int64_t dim, bool log))                          \
  /* grad_x from grad_y and the forward output y */                                              \
  _(softmax_backward, void(Tensor& grad_x, const Tensor& grad_y, const Tensor& y, int64_t dim, bool log)) \
  /* out[b] = a[b] @ b[b]; 3-D operands, same dtype */                                           \
  _(bmm, void(Tensor& out, const Tensor& a, const Tensor& b))                                    \
  /* index is i64 and 1-D */                                                                     \
  _(index_select, void(Tensor& out, const Tensor& x, int64_t dim, const Tensor& index))          \
  /* out.index_select(dim, index) += src, in place */                                            \
  _(index_add, void(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src))           \
  /* out has index's shape */                                                                    \
  _(gather, void(Tensor& out, const Tensor& x, int64_t dim, const Tensor& index))                \
  /* out[index[i][j]][j] += src[i][j] (for dim 0), in place */                                   \
  _(scatter_add, void(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src))         \
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
  _(non_finite_check_and_unscale, void(Tensor& grad, Tensor& found_inf, double inv_scale))

#define KILN_DECLARE_KERNEL_(NAME, SIG) extern KernelStub<SIG> NAME;
KILN_KERNEL_LIST(KILN_DECLARE_KERNEL_)
#undef KILN_DECLARE_KERNEL_

}  // namespace kiln::kernels
