// Backward of the fused cross_entropy primitive: the gradient flows to the logits only (the
// target is an index). It recomputes softmax from the forward's saved logsumexp in the
// cross_entropy_backward kernel, so no [N, C] probabilities are kept between passes.
#include "autograd/functions/common.h"
#include "core/kernels.h"
#include "core/ops/cross_entropy.h"

namespace kiln::autograd {
namespace {

Tensor cross_entropy_autograd(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                              double label_smoothing) {
  Tensor loss, lse;
  {
    NoGradGuard g;
    std::tie(loss, lse) = cross_entropy_with_lse(logits, target, ignore_index, label_smoothing);
  }
  SavedTensor sx(logits), slse(lse), st(target);
  const DType dtype = logits.dtype();
  record("CrossEntropyBackward", {logits}, {loss}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    if (!gs[0].defined()) return {Tensor()};
    NoGradGuard no_grad;
    const char* name = "CrossEntropyBackward";
    Tensor x = sx.unpack(name), t = st.unpack(name);
    if (!x.is_contiguous()) x = x.contiguous();
    if (!t.is_contiguous()) t = t.contiguous();
    Tensor g = gs[0].dtype() == dtype ? gs[0] : gs[0].to(dtype);
    if (!g.is_contiguous()) g = g.contiguous();
    Tensor gx = make_tensor(x.sizes(), dtype, x.device());
    kernels::cross_entropy_backward[x.device()](gx, g, x, slse.unpack(name), t, ignore_index, label_smoothing);
    return {gx};
  });
  return loss;
}

}  // namespace
}  // namespace kiln::autograd

KILN_REGISTER_AUTOGRAD(cross_entropy, &kiln::autograd::cross_entropy_autograd);
