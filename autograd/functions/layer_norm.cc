// Backward of the fused layer_norm primitive: gradients to x, weight and bias (each only when
// it requires grad) from the forward's per-row mean and rstd, in one layer_norm_backward call
// over x viewed as [M, N].
#include "autograd/functions/common.h"
#include "core/kernels.h"
#include "core/ops/layer_norm.h"

namespace kiln::autograd {
namespace {

Tensor layer_norm_autograd(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t normalized_dims,
                           double eps) {
  Tensor out, mean, rstd;
  {
    NoGradGuard g;
    std::tie(out, mean, rstd) = layer_norm_with_stats(x, weight, bias, normalized_dims, eps);
  }
  const bool need_x = x.requires_grad();
  const bool need_w = weight.defined() && weight.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  // grad_x reads weight; every gradient but bias's reads x.
  SavedTensor sx(need_x || need_w ? x : Tensor()), sw(need_x ? weight : Tensor()), smean(mean), srstd(rstd);
  const Shape x_shape = x.sizes();
  const Shape w_shape(x_shape.end() - normalized_dims, x_shape.end());
  int64_t N = 1;
  for (int64_t d : w_shape) N *= d;
  const int64_t M = mean.numel();
  const DType dtype = x.dtype();
  const Device device = x.device();
  record("LayerNormBackward", {x, weight, bias}, {out},
         [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
           if (!gs[0].defined()) return {Tensor(), Tensor(), Tensor()};
           NoGradGuard no_grad;
           const char* name = "LayerNormBackward";
           Tensor g = gs[0].dtype() == dtype ? gs[0] : gs[0].to(dtype);
           g = (g.is_contiguous() ? g : g.contiguous()).reshape({M, N});
           Tensor xs = sx.unpack(name);
           // Only grad_bias wanted: x is not read, any [M, N] tensor gives the geometry.
           xs = xs.defined() ? (xs.is_contiguous() ? xs : xs.contiguous()).reshape({M, N}) : g;
           Tensor w = sw.unpack(name);
           if (w.defined()) w = (w.is_contiguous() ? w : w.contiguous()).reshape({N});
           Tensor gx = need_x ? make_tensor({M, N}, dtype, device) : Tensor();
           Tensor gw = need_w ? make_tensor({N}, dtype, device) : Tensor();
           Tensor gb = need_b ? make_tensor({N}, dtype, device) : Tensor();
           kernels::layer_norm_backward[device](gx, gw, gb, g, xs, smean.unpack(name), srstd.unpack(name), w);
           return {need_x ? gx.reshape(x_shape) : Tensor(), need_w ? gw.reshape(w_shape) : Tensor(),
                   need_b ? gb.reshape(w_shape) : Tensor()};
         });
  return out;
}

}  // namespace
}  // namespace kiln::autograd

KILN_REGISTER_AUTOGRAD(layer_norm, &kiln::autograd::layer_norm_autograd);
