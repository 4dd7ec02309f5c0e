// Backward formulas of convolution and pooling; each calls its CPU/CUDA backward kernel
// directly (these backward passes are not themselves differentiable).
#include "autograd/functions/common.h"
#include "core/conv.h"
#include "core/kernels.h"

namespace kiln::autograd {
namespace {

/// The incoming gradient as the contiguous `dtype` tensor the backward kernels expect.
Tensor kernel_grad(const Tensor& g, DType dtype) {
  Tensor r = g.dtype() == dtype ? g : g.to(dtype);
  return r.is_contiguous() ? r : r.contiguous();
}

Tensor shape_only(const Shape& shape, DType dtype, Device device) {
  return make_view(make_tensor({1}, dtype, device), shape, Shape(shape.size(), 0), 0);
}

Tensor conv2d_autograd(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  Tensor out = forward_no_grad([&] { return op::conv2d.forward(x, w, bias, p); });
  const bool need_x = x.requires_grad(), need_w = w.requires_grad();
  const bool need_b = bias.defined() && bias.requires_grad();
  // grad_x needs w and grad_w needs x: save only what a requested gradient reads.
  SavedTensor sx(need_w ? x : Tensor()), sw(need_x ? w : Tensor());
  const Shape x_shape = x.sizes(), w_shape = w.sizes();
  const DType dtype = x.dtype();
  const Device device = x.device();
  record("Conv2dBackward", {x, w, bias}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    if (!gs[0].defined()) return {Tensor(), Tensor(), Tensor()};
    NoGradGuard no_grad;
    const Tensor g = kernel_grad(gs[0], dtype);
    Tensor gx = need_x ? make_tensor(x_shape, dtype, device) : Tensor();
    Tensor gw = need_w ? make_tensor(w_shape, dtype, device) : Tensor();
    Tensor gb = need_b ? make_tensor({w_shape[0]}, dtype, device) : Tensor();
    // The kernel reads x only for grad_w and w only for grad_x; otherwise a one-element
    // stand-in broadcast to their shape gives it the geometry.
    Tensor xs = need_w ? sx.unpack("Conv2dBackward").contiguous() : shape_only(x_shape, dtype, device);
    Tensor ws = need_x ? sw.unpack("Conv2dBackward").contiguous() : shape_only(w_shape, dtype, device);
    kernels::conv2d_backward[device](gx, gw, gb, g, xs, ws, p);
    return {gx, gw, gb};
  });
  return out;
}

Tensor max_pool2d_autograd(const Tensor& x, const Pool2dParams& p) {
  auto [out, indices] = max_pool2d_with_indices(x, p);
  SavedTensor si(indices);
  const Shape x_shape = x.sizes();
  const DType dtype = x.dtype();
  record("MaxPool2dBackward", {x}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    if (!gs[0].defined()) return {Tensor()};
    NoGradGuard no_grad;
    const Tensor g = kernel_grad(gs[0], dtype);
    Tensor gx = make_tensor(x_shape, g.dtype(), g.device());
    kernels::max_pool2d_backward[g.device()](gx, g, si.unpack("MaxPool2dBackward"));
    return {gx};
  });
  return out;
}

Tensor avg_pool2d_autograd(const Tensor& x, const Pool2dParams& p) {
  Tensor out = forward_no_grad([&] { return op::avg_pool2d.forward(x, p); });
  const Shape x_shape = x.sizes();
  const DType dtype = x.dtype();
  record("AvgPool2dBackward", {x}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    if (!gs[0].defined()) return {Tensor()};
    NoGradGuard no_grad;
    const Tensor g = kernel_grad(gs[0], dtype);
    Tensor gx = make_tensor(x_shape, g.dtype(), g.device());
    kernels::avg_pool2d_backward[g.device()](gx, g, p);
    return {gx};
  });
  return out;
}

}  // namespace
}  // namespace kiln::autograd

KILN_REGISTER_AUTOGRAD(conv2d, &kiln::autograd::conv2d_autograd);
KILN_REGISTER_AUTOGRAD(max_pool2d, &kiln::autograd::max_pool2d_autograd);
KILN_REGISTER_AUTOGRAD(avg_pool2d, &kiln::autograd::avg_pool2d_autograd);
