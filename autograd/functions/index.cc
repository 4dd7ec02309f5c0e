// Backward formulas of indexing: index_select <-> index_add, gather <-> scatter_add.
#include "autograd/functions/common.h"

namespace kiln::autograd {
namespace {

Tensor index_select_autograd(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = forward_no_grad([&] { return op::index_select.forward(x, dim, index); });
  SavedTensor si(index);
  const Shape shape = x.sizes();
  record("IndexSelectBackward", {x, index}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    Tensor gx = zeros(shape, TensorOptions(gs[0].dtype()).device(gs[0].device()));
    return {index_add(gx, dim, si.unpack("IndexSelectBackward"), gs[0]), Tensor()};
  });
  return out;
}

Tensor gather_autograd(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = forward_no_grad([&] { return op::gather.forward(x, dim, index); });
  SavedTensor si(index);
  const Shape shape = x.sizes();
  record("GatherBackward", {x, index}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    Tensor gx = zeros(shape, TensorOptions(gs[0].dtype()).device(gs[0].device()));
    return {op::scatter_add(gx, dim, si.unpack("GatherBackward"), gs[0]), Tensor()};
  });
  return out;
}

Tensor scatter_add_autograd(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = forward_no_grad([&] { return op::scatter_add.forward(x, dim, index, src); });
  SavedTensor si(index);
  record("ScatterAddBackward", {x, index, src}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    return {gs[0], Tensor(), op::gather(gs[0], dim, si.unpack("ScatterAddBackward"))};
  });
  return out;
}

}  // namespace
}  // namespace kiln::autograd

KILN_REGISTER_AUTOGRAD(index_select, &kiln::autograd::index_select_autograd);
KILN_REGISTER_AUTOGRAD(gather, &kiln::autograd::gather_autograd);
KILN_REGISTER_AUTOGRAD(scatter_add, &kiln::autograd::scatter_add_autograd);
