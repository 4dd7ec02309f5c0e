// Backward of the fused attention primitive (core/ops/attention.h): one attention_backward
// call from the saved q, k, v, mask, output and per-row logsumexp, recomputing the probabilities
// tile by tile; an additive mask that requires grad gets dS summed down to its broadcast shape.
#include "autograd/functions/common.h"
#include "core/ops/attention.h"
#include "core/kernels.h"

namespace kiln::autograd {
namespace {

Shape lead_of(const Shape& s) { return Shape(s.begin(), s.end() - 2); }

Tensor attention_autograd(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                          const AttentionParams& p) {
  Tensor out, lse;
  {
    NoGradGuard g;
    std::tie(out, lse) = attention_with_lse(q, k, v, mask, p);
  }
  const bool need_mask = mask.defined() && mask.requires_grad() && mask.dtype() != kBool;
  SavedTensor sq(q), sk(k), sv(v), smask(mask), sout(out), slse(lse);
  const Shape q_shape = q.sizes(), k_shape = k.sizes(), v_shape = v.sizes();
  const Shape mask_shape = mask.defined() ? mask.sizes() : Shape{};
  const DType mask_dtype = mask.defined() ? mask.dtype() : q.dtype();
  const DType dtype = q.dtype();
  record("ScaledDotProductAttentionBackward", {q, k, v, mask}, {out},
         [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
           if (!gs[0].defined()) return {Tensor(), Tensor(), Tensor(), Tensor()};
           NoGradGuard no_grad;
           const char* name = "ScaledDotProductAttentionBackward";
           const Tensor q4 = attention_4d(sq.unpack(name)), k4 = attention_4d(sk.unpack(name)),
                        v4 = attention_4d(sv.unpack(name)), o4 = attention_4d(sout.unpack(name));
           const Tensor g4 = attention_4d(gs[0].dtype() == dtype ? gs[0] : gs[0].to(dtype));
           const Tensor lse3 = slse.unpack(name).reshape({q4.size(0), q4.size(1), q4.size(2)});
           const Shape lead = lead_of(q_shape);
           const int64_t Tq = q4.size(2), Tk = k4.size(2);
           const Tensor m4 = attention_mask_4d(smask.unpack(name), lead, Tq, Tk, dtype);
           // The gradients in attention_output's [.., T, H, D] layout, as the model's heads usually
           // are: the transpose back and the merge of the heads cost no copy.
           auto grad_like = [&](const Shape& s) {
             const Shape sl(s.begin(), s.end() - 2);
             return attention_output(sl, s[s.size() - 2], s.back(), dtype, q4.device());
           };
           Tensor gq = grad_like(q_shape), gk = grad_like(k_shape), gv = grad_like(v_shape);
           Tensor gq4 = attention_4d(gq), gk4 = attention_4d(gk), gv4 = attention_4d(gv);
           KILN_CHECK(gq4.storage() == gq.storage() && gk4.storage() == gk.storage() && gv4.storage() == gv.storage(),
                      "{}: internal: a gradient's [B, H, T, D] view is a copy", name);
           Tensor gm = need_mask ? make_tensor({q4.size(0), q4.size(1), Tq, Tk}, dtype, q4.device()) : Tensor();
           kernels::attention_backward[q4.device()](gq4, gk4, gv4, gm, g4, q4, k4, v4, m4, o4, lse3, p);
           if (gm.defined()) {
             Shape full = lead;
             full.push_back(Tq);
             full.push_back(Tk);
             gm = sum_to(gm.reshape(full), mask_shape);
             if (gm.dtype() != mask_dtype) gm = gm.to(mask_dtype);
           }
           return {gq, gk, gv, gm};
         });
  return out;
}

}  // namespace
}  // namespace kiln::autograd

KILN_REGISTER_AUTOGRAD(attention, &kiln::autograd::attention_autograd);
