// Tensor metadata, shape arithmetic and construction; the ops themselves live in core/ops/.
#include "core/tensor.h"

#include <sstream>

#include "core/autograd_meta.h"
#include "core/ops.h"
#include "core/view_history.h"

namespace kiln {

TensorImpl::TensorImpl(Storage s, Shape sz, Shape st, int64_t off, DType dt)
    : storage(std::move(s)), sizes(std::move(sz)), strides(std::move(st)), offset(off), dtype(dt) {}
TensorImpl::~TensorImpl() = default;

TensorImpl& Tensor::impl() const {
  KILN_CHECK(impl_ != nullptr, "Tensor: operation on an undefined tensor");
  return *impl_;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  int64_t n = ndim == 0 ? 1 : ndim;  // a 0-dim tensor accepts dim 0 / -1, as in PyTorch
  KILN_CHECK(dim >= -n && dim < n, "{}: dim {} out of range for a tensor with {} dims", op, dim, ndim);
  return dim < 0 ? dim + n : dim;
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (int64_t i = static_cast<int64_t>(shape.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    // A shape with a zero dim holds nothing, but its strides still multiply the other dims.
    if (__builtin_mul_overflow(acc, std::max<int64_t>(shape[i], 1), &acc))
      fail("shape {} is too large: its strides overflow int64", shape);
  }
  return st;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1,
               "{}: shapes {} and {} cannot be broadcast (dim {}: {} vs {})", op, a, b, i, da, db);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::string shape_str(const Shape& shape) { return fmt::format("{}", shape); }
std::string Tensor::shape_str() const { return kiln::shape_str(sizes()); }

Tensor make_tensor(const Shape& shape, DType dtype, Device device) {
  for (int64_t s : shape) KILN_CHECK(s >= 0, "empty: negative dimension in shape {}", shape);
  auto storage = std::make_shared<StorageImpl>(shape_numel(shape) * kiln::element_size(dtype), device);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), shape, contiguous_strides(shape), 0, dtype));
}

Tensor make_view(const Tensor& base, Shape sizes, Shape strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(base.storage(), std::move(sizes), std::move(strides), offset,
                                             base.dtype()));
}

int64_t Tensor::size(int64_t d) const { return sizes()[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "stride")]; }
int64_t Tensor::numel() const { return shape_numel(sizes()); }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no element to lay out (as PyTorch)
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (sizes()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= sizes()[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  return static_cast<char*>(impl().storage->data()) + offset() * static_cast<int64_t>(element_size());
}

Scalar Tensor::item() const {
  KILN_CHECK(numel() == 1, "item: tensor of shape {} has {} elements, expected 1", sizes(), numel());
  Tensor c = device().is_cpu() ? *this : to(kCPU);
  return KILN_DISPATCH_ALL(dtype(), "item", [&]<class T>() { return Scalar(*c.data_ptr<T>()); });
}

// ---- autograd state (its meaning lives in autograd/)

AutogradMeta& Tensor::mutable_autograd_meta() const {
  auto& m = impl().autograd;
  if (!m) m = std::make_unique<AutogradMeta>();
  return *m;
}

bool Tensor::requires_grad() const {
  detail::refresh_view_history(*this);
  const AutogradMeta* m = impl().autograd.get();
  return m != nullptr && (m->requires_grad || m->grad_fn != nullptr);
}

Tensor& Tensor::set_requires_grad(bool r) {
  KILN_CHECK(!r || is_floating(dtype()), "requires_grad: only floating tensors can require grad (dtype {})",
             dtype());
  KILN_CHECK(is_leaf(), "requires_grad: can only be changed on leaf tensors (this one was computed by an op; "
                        "use detach() first)");
  mutable_autograd_meta().requires_grad = r;
  return *this;
}

bool Tensor::is_leaf() const {
  detail::refresh_view_history(*this);
  const AutogradMeta* m = impl().autograd.get();
  return m == nullptr || m->grad_fn == nullptr;
}

Tensor Tensor::grad() const {
  const AutogradMeta* m = impl().autograd.get();
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined())
    KILN_CHECK(g.sizes() == sizes(), "set_grad: gradient shape {} does not match tensor shape {}", g.sizes(),
               sizes());
  mutable_autograd_meta().grad = g;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  detail::refresh_view_history(*this);
  const AutogradMeta* m = impl().autograd.get();
  return m ? m->grad_fn : none;
}

Tensor Tensor::detach() const { return make_view(*this, sizes(), strides(), offset()); }

Tensor& Tensor::detach_() {
  impl().view_tracks_grad = false;  // cut from the graph: no longer follows its base
  if (impl().autograd) {
    impl().autograd->grad_fn.reset();
    impl().autograd->requires_grad = false;
  }
  return *this;
}

void Tensor::retain_grad() const {
  if (is_leaf()) return;  // leaves keep their grad anyway
  mutable_autograd_meta().retains_grad = true;
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  KILN_CHECK(requires_grad(), "register_hook: tensor of shape {} does not require grad", sizes());
  auto& hooks = mutable_autograd_meta().grad_hooks;
  if (!hooks) hooks = std::make_shared<std::vector<std::function<Tensor(const Tensor&)>>>();
  hooks->push_back(std::move(hook));
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  KILN_CHECK(is_leaf() && requires_grad(),
             "register_post_accumulate_grad_hook: only leaf tensors that require grad accumulate gradients");
  mutable_autograd_meta().post_accumulate_hooks.push_back(std::move(hook));
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace kiln
