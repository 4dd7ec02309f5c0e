// Backward of batched matrix multiply (matmul and mm are built on it) and of linear.
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

Tensor linear_autograd(const Tensor& x, const Tensor& w, const Tensor& bias) {
  Tensor out = forward_no_grad([&] { return op::linear.forward(x, w, bias); });
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  SavedTensor sx(need_w ? x : Tensor()), sw(need_x ? w : Tensor());
  const Shape x_shape = x.sizes();
  record("LinearBackward", {x, w, bias}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    const int64_t out_features = gs[0].size(-1);
    Tensor g = gs[0].reshape({-1, out_features});  // [rows, out]
    Tensor gx, gw, gb;
    if (need_x) gx = mm(g, sw.unpack("LinearBackward")).reshape(x_shape);  // [rows, in]
    if (need_w) {
      Tensor X = sx.unpack("LinearBackward");
      gw = mm(g.t(), X.reshape({-1, X.size(-1)}));  // [out, in], contiguous like the weight
    }
    if (need_b) gb = g.sum({0});
    return {gx, gw, gb};
  });
  return out;
}

}  // namespace
}  // namespace kiln::autograd

KILN_REGISTER_AUTOGRAD(bmm, &kiln::autograd::bmm_autograd);
KILN_REGISTER_AUTOGRAD(linear, &kiln::autograd::linear_autograd);
