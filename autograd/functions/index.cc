// Backward formulas of indexing: index_select <-> index_add, gather <-> scatter_add, embedding
// (a scatter-add of the rows' gradients, none for the padding row).
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
  const Shape src_shape = src.sizes();
  record("ScatterAddBackward", {x, index, src}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    Tensor g_src = op::gather(gs[0], dim, si.unpack("ScatterAddBackward"));
    if (g_src.sizes() != src_shape) {
      // The index may cover only the leading part of src; the rest got no gradient.
      Tensor full = zeros(src_shape, TensorOptions(g_src.dtype()).device(g_src.device()));
      Tensor window = full;
      for (int64_t d = 0; d < g_src.dim(); ++d) window = window.narrow(d, 0, g_src.size(d));
      window.copy_(g_src);
      g_src = full;
    }
    return {gs[0], Tensor(), g_src};
  });
  return out;
}

Tensor index_add_autograd(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = forward_no_grad([&] { return op::index_add.forward(x, dim, index, src); });
  SavedTensor si(index);
  record("IndexAddBackward", {x, index, src}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    Tensor idx = si.unpack("IndexAddBackward");
    return {gs[0], Tensor(), gs[0].index_select(dim, idx.dim() == 0 ? idx.reshape({1}) : idx)};
  });
  return out;
}

Tensor embedding_autograd(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  Tensor out = forward_no_grad([&] { return op::embedding.forward(weight, indices, padding_idx); });
  SavedTensor si(indices);
  const Shape shape = weight.sizes();
  record("EmbeddingBackward", {weight, indices}, {out}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    Tensor idx = si.unpack("EmbeddingBackward").reshape({-1});
    Tensor rows = gs[0].reshape({idx.numel(), shape[1]});
    if (padding_idx >= 0) rows = where((idx == Scalar(padding_idx)).unsqueeze(1), 0.0, rows);
    Tensor gw = zeros(shape, TensorOptions(rows.dtype()).device(rows.device()));
    return {index_add(gw, 0, idx, rows), Tensor()};
  });
  return out;
}

}  // namespace
}  // namespace kiln::autograd

KILN_REGISTER_AUTOGRAD(index_select, &kiln::autograd::index_select_autograd);
KILN_REGISTER_AUTOGRAD(gather, &kiln::autograd::gather_autograd);
KILN_REGISTER_AUTOGRAD(scatter_add, &kiln::autograd::scatter_add_autograd);
KILN_REGISTER_AUTOGRAD(index_add, &kiln::autograd::index_add_autograd);
KILN_REGISTER_AUTOGRAD(embedding, &kiln::autograd::embedding_autograd);
