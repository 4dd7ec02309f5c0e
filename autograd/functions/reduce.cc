// Backward formulas of reductions and softmax.
#include "autograd/functions/common.h"
#include "core/kernels.h"

namespace kiln::autograd {
namespace {

/// The reduced dims of `op` on a tensor of rank `ndim` (empty list = all), wrapped and sorted.
IntList reduced_dims(const IntList& dims, int64_t ndim) {
  IntList out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
  } else {
    for (int64_t d : dims) out.push_back(wrap_dim(d, ndim, "reduce"));
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// Re-inserts the reduced dims as size 1 so `t` broadcasts against the input.
Tensor unsqueeze_reduced(const Tensor& t, const IntList& dims, bool keepdim) {
  if (keepdim) return t;
  Tensor r = t;
  for (int64_t d : dims) r = r.unsqueeze(d);
  return r;
}

Tensor reduce_autograd(ReduceKind kind, const Tensor& x, const IntList& dims, bool keepdim) {
  Tensor out = forward_no_grad([&] { return op::reduce.forward(kind, x, dims, keepdim); });
  if (!is_floating(out.dtype())) return out;
  const IntList rd = reduced_dims(dims, x.dim());
  const Shape shape = x.sizes();
  int64_t count = 1;
  for (int64_t d : rd) count *= x.dim() ? shape[d] : 1;
  const bool needs_x = kind != ReduceKind::sum && kind != ReduceKind::mean;
  SavedTensor sx(needs_x ? x : Tensor()), sout(needs_x ? out : Tensor());
  const std::string name = backward_name(kind_name(kind));
  record(name.c_str(), {x}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    Tensor g = unsqueeze_reduced(gs[0], rd, keepdim);
    switch (kind) {
      case ReduceKind::sum: return {g.expand(shape)};
      case ReduceKind::mean: return {(g / static_cast<double>(count)).expand(shape)};
      case ReduceKind::max:
      case ReduceKind::min: {
        // Ties share the gradient evenly (as torch.amax).
        Tensor X = sx.unpack(name.c_str());
        Tensor y = unsqueeze_reduced(sout.unpack(name.c_str()), rd, keepdim);
        Tensor mask = (X == y).to(X.dtype());
        return {g * mask / mask.sum(rd, /*keepdim=*/true)};
      }
      case ReduceKind::prod: {
        // d/dx_i prod = prod / x_i (inputs with zeros are not supported by this formula).
        Tensor X = sx.unpack(name.c_str());
        Tensor y = unsqueeze_reduced(sout.unpack(name.c_str()), rd, keepdim);
        return {g * y / X};
      }
    }
    fail("reduce backward: unknown kind");
  });
  return out;
}

Tensor softmax_autograd(const Tensor& x, int64_t dim, bool log) {
  Tensor y = forward_no_grad([&] { return op::softmax.forward(x, dim, log); });
  SavedTensor sy(y);
  const char* name = log ? "LogSoftmaxBackward" : "SoftmaxBackward";
  const int64_t d = wrap_dim(dim, x.dim(), name);
  record(name, {x}, {y}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    Tensor Y = sy.unpack(name);
    Tensor g = gs[0].dtype() == Y.dtype() ? gs[0] : gs[0].to(Y.dtype());
    Tensor gx = make_tensor(Y.sizes(), Y.dtype(), Y.device());
    kernels::softmax_backward[Y.device()](gx, g, Y, d, log);
    return {gx};
  });
  return y;
}

}  // namespace
}  // namespace kiln::autograd

KILN_REGISTER_AUTOGRAD(reduce, &kiln::autograd::reduce_autograd);
KILN_REGISTER_AUTOGRAD(softmax, &kiln::autograd::softmax_autograd);
