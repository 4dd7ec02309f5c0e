// Tensor: a handle to (storage, sizes, strides, offset, dtype) plus optional autograd state.
// Copying a Tensor copies the handle (as in PyTorch); views share storage. Methods mirror the
// free functions in core/ops.h, so `x.sum({1}, true)` and `kiln::sum(x, {1}, true)` are the same.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/scalar.h"
#include "core/storage.h"

namespace kiln {

using Shape = std::vector<int64_t>;
using IntList = std::vector<int64_t>;

struct AutogradMeta;
class Generator;
namespace autograd {
class Node;
}

/// Options for creation ops: `kiln::zeros({2, 3}, kiln::dtype(kFloat64).device("cuda"))`.
struct TensorOptions {
  DType dtype_ = kDefaultFloat;
  Device device_ = kCPU;
  bool requires_grad_ = false;

  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t) {}    // NOLINT: zeros({2}, kInt64) reads well
  TensorOptions(Device d) : device_(d) {}  // NOLINT
  TensorOptions& dtype(DType t) { dtype_ = t; return *this; }
  TensorOptions& device(Device d) { device_ = d; return *this; }
  TensorOptions& requires_grad(bool r = true) { requires_grad_ = r; return *this; }
};
inline TensorOptions dtype(DType t) { return TensorOptions().dtype(t); }
inline TensorOptions device(Device d) { return TensorOptions().device(d); }
inline TensorOptions requires_grad(bool r = true) { return TensorOptions().requires_grad(r); }

class TensorImpl {
 public:
  TensorImpl(Storage storage, Shape sizes, Shape strides, int64_t offset, DType dtype);
  ~TensorImpl();

  Storage storage;
  Shape sizes;
  Shape strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype;
  std::unique_ptr<AutogradMeta> autograd;  // null until autograd needs it
  bool is_view = false;  // shares storage with the tensor it was viewed from (view ops set it)
  // PyTorch's view + in-place semantics. A view knows its root base (the non-view tensor whose
  // storage it shares; views share its version counter through the storage). When the storage's
  // version moves past `view_version`, the view's autograd history is stale (its base, or
  // another view of it, was written in place) and is rebuilt from the base's current history.
  std::shared_ptr<TensorImpl> view_base;
  uint32_t view_version = 0;
  bool view_tracks_grad = false;  // made while grad mode was on: its history follows the base's
};

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata
  bool defined() const { return impl_ != nullptr; }
  const Shape& sizes() const { return impl().sizes; }
  const Shape& shape() const { return impl().sizes; }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  const Shape& strides() const { return impl().strides; }
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(impl().sizes.size()); }
  int64_t numel() const;
  int64_t offset() const { return impl().offset; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device(); }
  bool is_cuda() const { return device().is_cuda(); }
  size_t element_size() const { return kiln::element_size(dtype()); }
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  const Storage& storage() const { return impl().storage; }
  /// Address of the first element (storage base + offset).
  void* data_ptr() const;
  /// Typed address of the first element; throws if T is not this tensor's dtype.
  template <class T> T* data_ptr() const;
  /// The single value of a one-element tensor (copied to the host if needed).
  template <class T> T item() const;
  Scalar item() const;
  /// All values as a flat host vector in logical (row-major) order, converted to T.
  template <class T> std::vector<T> to_vector() const;
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }
  TensorImpl* unsafe_impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  std::string str() const;  // what operator<< prints
  std::string shape_str() const;  // "[2, 3]"

  // ---- autograd
  bool requires_grad() const;
  /// Marks a leaf as requiring grad (as tensor.requires_grad_()); returns *this.
  Tensor& set_requires_grad(bool requires_grad = true);
  Tensor& requires_grad_(bool requires_grad = true) { return set_requires_grad(requires_grad); }
  bool is_leaf() const;
  /// The accumulated gradient (undefined until a backward reached this tensor).
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  /// Runs backward from this tensor (defined in autograd/; link //autograd).
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  /// A tensor sharing storage but cut from the graph.
  Tensor detach() const;
  Tensor& detach_();
  /// Keeps .grad for a non-leaf after backward.
  void retain_grad() const;
  /// Hook on the gradient flowing into this tensor; may return a replacement gradient.
  void register_hook(std::function<Tensor(const Tensor&)> hook) const;
  /// Leaf-only hook run right after the gradient was accumulated into .grad.
  void register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  uint32_t version() const { return impl().storage->version(); }
  AutogradMeta* autograd_meta() const { return impl().autograd.get(); }
  AutogradMeta& mutable_autograd_meta() const;

  // ---- conversion and copies
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor to(Device device, DType dtype) const;
  Tensor cpu() const { return to(kCPU); }
  Tensor contiguous() const;
  Tensor clone() const;

  // ---- views
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;
  Tensor permute(const IntList& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  Tensor cumsum(int64_t dim) const;
  Tensor cumprod(int64_t dim) const;
  Tensor argsort(int64_t dim = -1, bool descending = false) const;
  Tensor flip(const IntList& dims) const;
  Tensor roll(const IntList& shifts, const IntList& dims = {}) const;
  Tensor repeat(const IntList& repeats) const;
  Tensor tile(const IntList& reps) const;
  Tensor norm(double p = 2, const IntList& dims = {}, bool keepdim = false) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;

  // ---- elementwise
  Tensor neg() const;
  Tensor abs() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor gelu() const;
  Tensor silu() const;
  Tensor square() const;
  Tensor pow(const Scalar& exponent) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max) const;
  Tensor masked_fill(const Tensor& mask, const Scalar& value) const;

  // ---- reductions
  Tensor sum() const;
  Tensor sum(const IntList& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const IntList& dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  Tensor amax(const IntList& dims, bool keepdim = false) const;
  Tensor amin(const IntList& dims, bool keepdim = false) const;
  Tensor argmax() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor argmin() const;
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  Tensor var(const IntList& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor std(const IntList& dims = {}, int64_t correction = 1, bool keepdim = false) const;
  Tensor logsumexp(const IntList& dims, bool keepdim = false) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

  // ---- linear algebra and indexing
  Tensor matmul(const Tensor& other) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;

  // ---- in place (bump the version counter)
  Tensor& fill_(const Scalar& value);
  Tensor& zero_();
  Tensor& copy_(const Tensor& src);
  Tensor& masked_fill_(const Tensor& mask, const Scalar& value);
  /// Random fills of any (strided) tensor, never recorded (core/ops/random.cc); a tensor that
  /// requires grad is filled only with recording off (NoGradGuard). uniform_ and normal_ need a
  /// floating dtype; bernoulli_ writes 1 with probability p, else 0, in any dtype.
  Tensor& uniform_(double low = 0.0, double high = 1.0, Generator* gen = nullptr);
  Tensor& normal_(double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
  Tensor& bernoulli_(double p, Generator* gen = nullptr);
  Tensor& add_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& add_(const Scalar& other);
  Tensor& sub_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(const Scalar& other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(const Scalar& other);
  Tensor& operator+=(const Tensor& o) { return add_(o); }
  Tensor& operator+=(const Scalar& o) { return add_(o); }
  Tensor& operator-=(const Tensor& o) { return sub_(o); }
  Tensor& operator*=(const Tensor& o) { return mul_(o); }
  Tensor& operator*=(const Scalar& o) { return mul_(o); }
  Tensor& operator/=(const Tensor& o) { return div_(o); }
  Tensor& operator/=(const Scalar& o) { return div_(o); }

 private:
  TensorImpl& impl() const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Pieces of shape arithmetic every layer needs.
/// Wraps a possibly negative dim into [0, ndim); throws naming `op` when out of range.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
int64_t shape_numel(const Shape& shape);
Shape contiguous_strides(const Shape& shape);
/// The broadcast of two shapes (NumPy rules); throws naming `op` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
std::string shape_str(const Shape& shape);

/// A new uninitialised tensor on `device` (the allocator of that device must be linked).
Tensor make_tensor(const Shape& shape, DType dtype, Device device);
/// A view of `base`'s storage with the given geometry (no copy, no autograd).
Tensor make_view(const Tensor& base, Shape sizes, Shape strides, int64_t offset);

}  // namespace kiln

namespace kiln {

template <class T> T* Tensor::data_ptr() const {
  KILN_CHECK(dtype_of<T>::value == dtype(), "data_ptr: tensor has dtype {}, asked for {}", dtype(),
             dtype_of<T>::value);
  return static_cast<T*>(data_ptr());
}

template <class T> T Tensor::item() const { return item().to<T>(); }

template <class T> std::vector<T> Tensor::to_vector() const {
  Tensor c = to(kCPU, dtype_of<T>::value).contiguous();
  const T* p = c.data_ptr<T>();
  return std::vector<T>(p, p + c.numel());
}

}  // namespace kiln
