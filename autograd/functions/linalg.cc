// Backward of batched matrix multiply (matmul, mm and linear are built on it).
#include "autograd/functions/common.h"

namespace kiln::autograd {
namespace {

Tensor bmm_autograd(const Tensor& a, const Tensor& b) {
  Tensor out = forward_no_grad([&] { return op::bmm.forward(a, b); });
  const bool need_a = b.requires_grad(), need_b = a.requires_grad();
  SavedTensor sa(need_a ? a : Tensor()), sb(need_b ? b : Tensor());
  const bool ga_needed = a.requires_grad(), gb_needed = b.requires_grad();
  record("BmmBackward", {a, b}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    const Tensor& g = gs[0];
    Tensor ga, gb;
    // Transposed operands are strided views; the GEMM kernel reads them without copying.
    if (ga_needed) ga = op::bmm(g, sb.unpack("BmmBackward").transpose(1, 2));
    if (gb_needed) gb = op::bmm(sa.unpack("BmmBackward").transpose(1, 2), g);
    return {ga, gb};
  });
  return out;
}

}  // namespace
}  // namespace kiln::autograd

KILN_REGISTER_AUTOGRAD(bmm, &kiln::autograd::bmm_autograd);
