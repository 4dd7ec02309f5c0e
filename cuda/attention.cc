// Host side of the flash-style CUDA attention (cuda/kernels/attention.cu): checks the head dims
// the kernels hold in registers, describes the mask by its strides (no broadcast copy), and
// launches on the current stream. Registered into the attention_forward/attention_backward slots
// of core/kernels.h.
#include "core/ops/attention.h"
#include "core/dense.h"
#include "core/kernels.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/kernels/attention.h"
#include "cuda/launch_util.h"
#include "cuda/stream.h"

namespace kiln::cuda {
namespace {

/// A limit of this backend only (the CUDA kernels hold a row of q, k and v in registers), so it
/// is checked here; every other condition is the slot's contract, checked by
/// core/ops/attention.cc (one floating dtype, the mask bool or q's dtype, one device).
kern::AttentionShape shape_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  KILN_CHECK(q.size(3) <= kern::kAttentionMaxDim && v.size(3) <= kern::kAttentionMaxDim,
             "scaled_dot_product_attention: the CUDA kernel takes head dims up to {}, got q/k {} and v {}",
             kern::kAttentionMaxDim, q.size(3), v.size(3));
  return {q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), v.size(3)};
}

kern::AttentionMask mask_of(const Tensor& m) {
  kern::AttentionMask r;
  if (!m.defined()) return r;
  r.data = m.data_ptr();
  r.is_bool = m.dtype() == kBool;
  r.sb = m.stride(0), r.sh = m.stride(1), r.si = m.stride(2), r.sj = m.stride(3);
  return r;
}

kern::AttentionFlags flags_of(const AttentionParams& p) {
  return {p.scale, p.causal, p.dropout_p, p.seed, p.offset, attention_dropout_threshold(p.dropout_p)};
}

DType math_dtype(DType t) { return t == kFloat64 ? kFloat64 : kFloat32; }

void attention_forward_kernel(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& mask, const AttentionParams& p) {
  const kern::AttentionShape s = shape_of(q, k, v);
  if (out.numel() == 0) return;
  DeviceGuard g(q.device());
  const Tensor qc = dense(q), kc = dense(k), vc = dense(v);
  Tensor o = writable(out), l = writable_as(lse, math_dtype(q.dtype()));
  kern::launch_attention_forward(scalar_type(q.dtype()), qc.data_ptr(), kc.data_ptr(), vc.data_ptr(),
                                 mask_of(mask), o.data_ptr(), l.data_ptr(), s, flags_of(p), stream_of(q));
  KILN_CUDA_CHECK_LAUNCH();
  write_back(out, o);
  write_back(lse, l);
}

void attention_backward_kernel(Tensor& grad_q, Tensor& grad_k, Tensor& grad_v, Tensor& grad_mask,
                               const Tensor& grad_out, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& mask, const Tensor& out, const Tensor& lse, const AttentionParams& p) {
  const kern::AttentionShape s = shape_of(q, k, v);
  DeviceGuard g(q.device());
  const DType md = math_dtype(q.dtype());
  const Tensor go = dense(grad_out), qc = dense(q), kc = dense(k), vc = dense(v), oc = dense(out),
               lc = dense_as(lse, md);
  Tensor gq = writable(grad_q), gk = writable(grad_k), gv = writable(grad_v), gm = writable(grad_mask);
  if (s.Tq == 0 || s.Tk == 0) {
    for (Tensor* t : {&gq, &gk, &gv, &gm})
      if (t->defined() && t->numel() > 0) kernels::fill[q.device()](*t, Scalar(0));
  } else {
    Tensor scratch = make_tensor({s.B * s.H * s.Tq}, md, q.device());
    kern::launch_attention_backward(scalar_type(q.dtype()), go.data_ptr(), qc.data_ptr(), kc.data_ptr(),
                                    vc.data_ptr(), mask_of(mask), oc.data_ptr(), lc.data_ptr(),
                                    scratch.data_ptr(), gq.data_ptr(), gk.data_ptr(), gv.data_ptr(),
                                    gm.defined() ? gm.data_ptr() : nullptr, s, flags_of(p), stream_of(q));
    KILN_CUDA_CHECK_LAUNCH();
  }
  write_back(grad_q, gq);
  write_back(grad_k, gk);
  write_back(grad_v, gv);
  write_back(grad_mask, gm);
}

}  // namespace

KILN_REGISTER_KERNEL(attention_forward, DeviceType::CUDA, &attention_forward_kernel);
KILN_REGISTER_KERNEL(attention_backward, DeviceType::CUDA, &attention_backward_kernel);

}  // namespace kiln::cuda
