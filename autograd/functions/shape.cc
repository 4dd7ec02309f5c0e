// Backward formulas of views, joins and conversions: each sends the gradient back to the
// input's geometry (reshape back, inverse permute, pad a slice, join a split, sum an expansion, split a cat).
#include "autograd/functions/common.h"

namespace kiln::autograd {
namespace {

/// Runs a view op's forward unrecorded; the view still follows its base's history (in-place
/// writes through it or its base reach autograd: autograd/functions/inplace.cc).
template <class F> Tensor tracked_view(F&& f) {
  Tensor out = forward_no_grad(std::forward<F>(f));
  out.unsafe_impl()->view_tracks_grad = true;
  return out;
}

Tensor view_autograd(const Tensor& x, const Shape& shape) {
  Tensor out = tracked_view([&] { return op::view.forward(x, shape); });
  const Shape in_shape = x.sizes();
  record("ViewBackward", {x}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    return {gs[0].reshape(in_shape)};
  });
  return out;
}

Tensor permute_autograd(const Tensor& x, const IntList& dims) {
  Tensor out = tracked_view([&] { return op::permute.forward(x, dims); });
  IntList inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[wrap_dim(dims[i], x.dim(), "permute")] = static_cast<int64_t>(i);
  record("PermuteBackward", {x}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    return {gs[0].permute(inverse)};
  });
  return out;
}

Tensor slice_autograd(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  Tensor out = tracked_view([&] { return op::slice.forward(x, dim, start, end, step); });
  const Shape in_shape = x.sizes();
  const DType dt = x.dtype();
  const Device dev = x.device();
  record("SliceBackward", {x}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    Tensor gx = zeros(in_shape, TensorOptions(dt).device(dev));
    Tensor window = op::slice(gx, dim, start, end, step);
    window.copy_(gs[0]);
    return {gx};
  });
  return out;
}

std::vector<Tensor> split_with_sizes_autograd(const Tensor& x, const IntList& sizes, int64_t dim) {
  std::vector<Tensor> outs = forward_no_grad([&] { return op::split_with_sizes.forward(x, sizes, dim); });
  for (Tensor& o : outs) o.unsafe_impl()->view_tracks_grad = true;
  const Shape in_shape = x.sizes();
  const DType dt = x.dtype();
  const Device dev = x.device();
  // One node for all the pieces: their gradients are copied side by side into one tensor (zeros
  // for a piece that got none), not each padded to the input's size and summed.
  record("SplitBackward", {x}, outs, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    Tensor gx = make_tensor(in_shape, dt, dev);
    int64_t at = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      Tensor window = op::slice(gx, dim, at, at + sizes[i], 1);
      if (i < gs.size() && gs[i].defined()) window.copy_(gs[i]);
      else window.zero_();
      at += sizes[i];
    }
    return {gx};
  });
  return outs;
}

Tensor expand_autograd(const Tensor& x, const Shape& shape) {
  Tensor out = tracked_view([&] { return op::expand.forward(x, shape); });
  const Shape in_shape = x.sizes();
  record("ExpandBackward", {x}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    return {sum_to(gs[0], in_shape)};
  });
  return out;
}

Tensor cat_autograd(const std::vector<Tensor>& xs, int64_t dim) {
  Tensor out = forward_no_grad([&] { return op::cat.forward(xs, dim); });
  const int64_t d = wrap_dim(dim, out.dim(), "cat");
  IntList sizes;
  for (const Tensor& x : xs) sizes.push_back((x.dim() == 0 || (x.numel() == 0 && x.dim() == 1)) ? 0 : x.size(d));
  record("CatBackward", xs, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    std::vector<Tensor> grads;
    int64_t offset = 0;
    for (int64_t s : sizes) {
      grads.push_back(gs[0].narrow(d, offset, s));
      offset += s;
    }
    return grads;
  });
  return out;
}

Tensor to_dtype_autograd(const Tensor& x, DType dtype) {
  Tensor out = forward_no_grad([&] { return op::to_dtype.forward(x, dtype); });
  if (out.is_same(x) || !is_floating(dtype)) return out;
  const DType in = x.dtype();
  // Saves nothing, so the node survives backward: autocast reuses one cast of a weight across
  // every graph built under its guard (gradient accumulation runs several backwards through it).
  record("ToDtypeBackward", {x}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    return {gs[0].to(in)};
  }, /*saves_nothing=*/true);
  return out;
}

Tensor to_device_autograd(const Tensor& x, Device device) {
  Tensor out = forward_no_grad([&] { return op::to_device.forward(x, device); });
  if (out.is_same(x)) return out;
  const Device in = x.device();
  record("ToDeviceBackward", {x}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    return {gs[0].to(in)};
  });
  return out;
}

Tensor clone_autograd(const Tensor& x) {
  Tensor out = forward_no_grad([&] { return op::clone.forward(x); });
  record("CloneBackward", {x}, {out}, [](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    return {gs[0]};
  });
  return out;
}

}  // namespace
}  // namespace kiln::autograd

KILN_REGISTER_AUTOGRAD(view, &kiln::autograd::view_autograd);
KILN_REGISTER_AUTOGRAD(permute, &kiln::autograd::permute_autograd);
KILN_REGISTER_AUTOGRAD(slice, &kiln::autograd::slice_autograd);
KILN_REGISTER_AUTOGRAD(expand, &kiln::autograd::expand_autograd);
KILN_REGISTER_AUTOGRAD(cat, &kiln::autograd::cat_autograd);
KILN_REGISTER_AUTOGRAD(split_with_sizes, &kiln::autograd::split_with_sizes_autograd);
KILN_REGISTER_AUTOGRAD(to_dtype, &kiln::autograd::to_dtype_autograd);
KILN_REGISTER_AUTOGRAD(to_device, &kiln::autograd::to_device_autograd);
KILN_REGISTER_AUTOGRAD(clone, &kiln::autograd::clone_autograd);
