// Backward of training-mode batch norm: gradients to x, weight and bias from one call of the
// device's batch_norm_backward kernel, reading the batch statistics the forward saved (never
// recomputing them). Not itself differentiable (no double backward).
#include "autograd/functions/common.h"
#include "core/kernels.h"
#include "core/ops/batch_norm.h"

namespace kiln::autograd {
namespace {

Tensor batch_norm_autograd(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                           Tensor running_var, double momentum, double eps) {
  Tensor out, save_mean, save_invstd;
  {
    NoGradGuard g;
    std::tie(out, save_mean, save_invstd) =
        batch_norm_training(x, weight, bias, running_mean, running_var, momentum, eps);
  }
  const bool need_x = x.requires_grad();
  const bool need_w = weight.defined() && weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  // x and the statistics are read by every gradient but grad_bias; weight only by grad_x.
  const bool need_stats = need_x || need_w;
  SavedTensor sx(need_stats ? x : Tensor()), sw(need_x ? weight : Tensor());
  SavedTensor smean(need_stats ? save_mean : Tensor()), sinvstd(need_stats ? save_invstd : Tensor());
  const Shape x_shape = x.sizes();
  const DType x_dtype = x.dtype();
  const DType w_dtype = weight.defined() ? weight.dtype() : x_dtype, b_dtype = bias.defined() ? bias.dtype() : x_dtype;
  const Device device = x.device();
  const int64_t channels = x.size(1);
  constexpr const char* kName = "BatchNormBackward";
  record(kName, {x, weight, bias}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    if (!gs[0].defined()) return {Tensor(), Tensor(), Tensor()};
    NoGradGuard no_grad;
    Tensor g = gs[0].dtype() == x_dtype ? gs[0] : gs[0].to(x_dtype);
    if (!g.is_contiguous()) g = g.contiguous();
    Tensor gx = need_x ? make_tensor(x_shape, x_dtype, device) : Tensor();
    Tensor gw = need_w ? make_tensor({channels}, w_dtype, device) : Tensor();
    Tensor gb = need_b ? make_tensor({channels}, b_dtype, device) : Tensor();
    if (!need_stats) {  // only grad_bias: the sum of g over every dim but 1
      IntList dims{0};
      for (int64_t d = 2; d < g.dim(); ++d) dims.push_back(d);
      gb.copy_((g.dtype() == b_dtype ? g : g.to(b_dtype)).sum(dims));
      return {gx, gw, gb};
    }
    Tensor X = sx.unpack(kName);
    if (!X.is_contiguous()) X = X.contiguous();
    const Tensor w = need_x ? sw.unpack(kName) : Tensor();
    kernels::batch_norm_backward[device](gx, gw, gb, g, X, w.defined() && !w.is_contiguous() ? w.contiguous() : w,
                                          smean.unpack(kName), sinvstd.unpack(kName));
    return {gx, gw, gb};
  });
  return out;
}

}  // namespace
}  // namespace kiln::autograd

KILN_REGISTER_AUTOGRAD(batch_norm, &kiln::autograd::batch_norm_autograd);
