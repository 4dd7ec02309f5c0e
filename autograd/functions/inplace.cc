// PyTorch's view + in-place semantics on the tape. An in-place op hands its history to the
// tensor written; written through a view, the view's base takes a CopySlices node whose backward
// sends the gradient of the written region to the op and the rest to the base's earlier history.
// A view whose base was written since it was made follows the base's new history through an
// AsStridedBackward node. Both are registered into core (core/view_history.h) at start-up.
#include "autograd/functions/common.h"
#include "core/view_history.h"

namespace kiln::autograd {
namespace {

/// Where a tensor's elements sit in its storage.
struct Geometry {
  Shape sizes, strides;
  int64_t offset = 0;
};

Geometry geometry_of(const Tensor& t) { return {t.sizes(), t.strides(), t.offset()}; }

/// A zero-filled gradient laid out like `base` in a fresh buffer, and `view`'s elements inside it
/// (a view only ever addresses elements of its base).
struct BaseGrad {
  Tensor base, region;
};

BaseGrad base_grad(const Geometry& base, const Geometry& view, DType dtype, Device device) {
  int64_t hi = base.offset;
  bool empty = false;
  for (size_t d = 0; d < base.sizes.size(); ++d) {
    empty = empty || base.sizes[d] == 0;
    hi += (base.sizes[d] - 1) * base.strides[d];
  }
  const int64_t extent = empty ? 0 : hi - base.offset + 1;
  Tensor buf = zeros({extent}, TensorOptions(dtype).device(device));
  return {make_view(buf, base.sizes, base.strides, 0),
          make_view(buf, view.sizes, view.strides, view.offset - base.offset)};
}

/// Makes `out` the single output of a new node named `name` over `inputs` (read before out's
/// history is replaced, so `out` may be among them). Hooks registered on `out` earlier stay with
/// its previous node, as in PyTorch.
void attach(const Tensor& out, const std::string& name, const std::vector<Tensor>& inputs,
            FunctionNode::Backward fn) {
  auto node = std::make_shared<FunctionNode>(name, std::move(fn), /*saves_nothing=*/true);
  node->set_next_edges(inputs);
  AutogradMeta& m = out.mutable_autograd_meta();
  m.grad_hooks = nullptr;
  m.grad_fn = node;
  m.output_nr = 0;
  node->add_output(out);
}

/// The gradient of a view's base from the view's gradient: zeros outside the view, the view's
/// gradient inside (summed over expanded dims, whose elements share one base element).
Tensor as_strided_backward(const Tensor& g, const Geometry& base, Geometry view) {
  IntList expanded;
  for (size_t d = 0; d < view.sizes.size(); ++d)
    if (view.strides[d] == 0 && view.sizes[d] > 1) {
      expanded.push_back(static_cast<int64_t>(d));
      view.sizes[d] = 1;
    }
  BaseGrad bg = base_grad(base, view, g.dtype(), g.device());
  bg.region.copy_(expanded.empty() ? g : g.sum(expanded, /*keepdim=*/true));
  return bg.base;
}

void refresh(const Tensor& view) {
  TensorImpl* v = view.unsafe_impl();
  v->view_version = v->storage->version();
  AutogradMeta* m = v->autograd.get();
  if (m != nullptr && m->requires_grad) return;  // a leaf the user marked: it has its own gradient
  Tensor base(v->view_base);
  if (!base.requires_grad()) {
    if (m != nullptr) m->grad_fn.reset();
    return;
  }
  const Geometry bgeo = geometry_of(base), vgeo = geometry_of(view);
  attach(view, "AsStridedBackward", {base}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    if (!gs[0].defined()) return {Tensor()};
    return {as_strided_backward(gs[0], bgeo, vgeo)};
  });
}

/// "FillBackward" from "fill_".
std::string inplace_backward_name(const char* op) {
  std::string s(op);
  if (!s.empty() && s.back() == '_') s.pop_back();
  return backward_name(s);
}

void rebase_plain(const Tensor& self, const Tensor& result, const char* op) {
  if (result.requires_grad() && result.grad_fn() != nullptr) {
    // The tensor becomes another name for the result's output in the graph.
    AutogradMeta& m = self.mutable_autograd_meta();
    m.grad_fn = result.grad_fn();
    m.output_nr = result.autograd_meta()->output_nr;
    m.grad_hooks = result.autograd_meta()->grad_hooks;  // hooks registered later reach the new node
  } else if (result.requires_grad()) {
    // The result is a leaf (copy_ from a parameter): its gradient is the tensor's.
    attach(self, "CopyBackwards", {result}, [](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
      return {gs[0]};
    });
  } else if (self.requires_grad()) {
    // The new value depends on nothing that requires grad: the old history gets zero gradient.
    attach(self, inplace_backward_name(op), {self}, [](const std::vector<Tensor>&) -> std::vector<Tensor> {
      return {Tensor()};
    });
  }
}

void rebase_view(const Tensor& self, const Tensor& result, const char* op) {
  TensorImpl* v = self.unsafe_impl();
  Tensor base(v->view_base);
  v->view_tracks_grad = true;  // from now on the view follows its base's history
  if (!base.requires_grad() && !result.requires_grad()) {
    refresh(self);
    return;
  }
  for (int64_t d = 0; d < base.dim(); ++d)
    KILN_CHECK(base.stride(d) != 0 || base.size(d) <= 1,
               "{}: cannot write in place through a view of an expanded tensor of shape {} (strides {})", op,
               base.sizes(), base.strides());
  const Geometry bgeo = geometry_of(base), vgeo = geometry_of(self);
  attach(base, "CopySlices", {base, result}, [=](const std::vector<Tensor>& gs) -> std::vector<Tensor> {
    if (!gs[0].defined()) return {Tensor(), Tensor()};
    BaseGrad bg = base_grad(bgeo, vgeo, gs[0].dtype(), gs[0].device());
    bg.base.copy_(gs[0]);
    Tensor g_result = bg.region.clone();  // what the written region's new value receives
    bg.region.fill_(0);                   // its old value was overwritten: no gradient
    return {bg.base, g_result};
  });
  refresh(self);
}

void rebase(const Tensor& self, const Tensor& result, const char* op) {
  if (self.unsafe_impl()->view_base != nullptr) rebase_view(self, result, op);
  else rebase_plain(self, result, op);
}

detail::Registrar g_view_history([] {
  detail::view_history_hooks().refresh = &refresh;
  detail::view_history_hooks().rebase = &rebase;
});

}  // namespace
}  // namespace kiln::autograd
