// View and shape ops. The primitives (view, permute, slice, expand) only re-describe the input's
// storage: no element is copied and the result is marked as a view. cat is the one primitive
// here that allocates. Everything else (reshape, transpose, select, squeeze, split, stack, ...)
// is composed of these, so autograd only needs their backward rules.
#include <algorithm>
#include <limits>
#include <optional>

#include "core/grad_mode.h"
#include "core/kernels.h"
#include "core/op_table.h"
#include "core/ops.h"

namespace kiln {
namespace {

/// Marks `t` as a view of `x`: it shares x's root base and version counter. Its history follows
/// the base's when it was made in grad mode (autograd's view wrappers, which run the forward with
/// grad mode off, set that flag themselves).
Tensor mark_view(Tensor t, const Tensor& x) {
  TensorImpl* v = t.unsafe_impl();
  const TensorImpl* src = x.unsafe_impl();
  v->is_view = true;
  v->view_base = src->view_base ? src->view_base : x.impl_ptr();
  v->view_version = x.version();
  v->view_tracks_grad = GradMode::is_enabled();
  return t;
}

/// Resolves a single -1 in `shape` against `numel` elements (PyTorch's infer_size).
Shape infer_shape(const Shape& shape, int64_t numel, const Shape& input_shape, const char* op) {
  Shape out = shape;
  std::optional<size_t> infer_dim;
  int64_t known = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      KILN_CHECK(!infer_dim, "{}: only one dimension can be inferred (-1) in shape {}", op, shape);
      infer_dim = d;
    } else {
      KILN_CHECK(shape[d] >= 0, "{}: invalid size {} at dim {} of shape {}", op, shape[d], d, shape);
      known *= shape[d];
    }
  }
  if (infer_dim) {
    KILN_CHECK(known != 0,
               "{}: cannot view a tensor of {} elements (shape {}) as shape {}: the size of the -1 dim would "
               "be ambiguous",
               op, numel, input_shape, shape);
    KILN_CHECK(numel % known == 0, "{}: shape {} is invalid for an input of {} elements (shape {})", op, shape,
               numel, input_shape);
    out[*infer_dim] = numel / known;
  } else {
    KILN_CHECK(known == numel, "{}: shape {} is invalid for an input of {} elements (shape {})", op, shape, numel,
               input_shape);
  }
  return out;
}

/// Strides that let a tensor of (old_sizes, old_strides) be read as new_sizes without a copy,
/// or nullopt when some new dim would have to span memory chunks that are not evenly spaced.
/// This is PyTorch's computeStride: walk the old dims from the innermost, grouping them into
/// chunks that are contiguous with each other, and fit the new dims into each chunk.
std::optional<Shape> compute_view_strides(const Shape& old_sizes, const Shape& old_strides,
                                          const Shape& new_sizes) {
  if (old_sizes.empty()) return Shape(new_sizes.size(), 1);
  const int64_t numel = shape_numel(old_sizes);
  if (numel == 0) {
    if (old_sizes == new_sizes) return old_strides;
    return contiguous_strides(new_sizes);  // no element is ever read: any strides do
  }
  Shape new_strides(new_sizes.size());
  int64_t view_d = static_cast<int64_t>(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_sizes[d];
    bool chunk_ends = d == 0 || (old_sizes[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_base_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
      new_strides[view_d] = view_numel * chunk_base_stride;
      view_numel *= new_sizes[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return std::nullopt;
    if (d > 0) {
      chunk_base_stride = old_strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  if (view_d != -1) return std::nullopt;
  return new_strides;
}

Tensor view_forward(const Tensor& x, const Shape& shape) {
  Shape sizes = infer_shape(shape, x.numel(), x.sizes(), "view");
  std::optional<Shape> strides = compute_view_strides(x.sizes(), x.strides(), sizes);
  KILN_CHECK(strides.has_value(),
             "view: shape {} is not compatible with the input's shape {} and strides {} (a new dim would span "
             "non-adjacent memory); use reshape(), which copies when it must",
             shape, x.sizes(), x.strides());
  return mark_view(make_view(x, std::move(sizes), std::move(*strides), x.offset()), x);
}

Tensor permute_forward(const Tensor& x, const IntList& dims) {
  const int64_t n = x.dim();
  KILN_CHECK(static_cast<int64_t>(dims.size()) == n,
             "permute: got {} dims {} for a tensor with {} dims (shape {})", dims.size(), dims, n, x.sizes());
  Shape sizes(n), strides(n);
  std::vector<bool> seen(n, false);
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = wrap_dim(dims[i], n, "permute");
    KILN_CHECK(!seen[d], "permute: dim {} repeats in {}", d, dims);
    seen[d] = true;
    sizes[i] = x.sizes()[d];
    strides[i] = x.strides()[d];
  }
  return mark_view(make_view(x, std::move(sizes), std::move(strides), x.offset()), x);
}

Tensor slice_forward(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  KILN_CHECK(x.dim() > 0, "slice: cannot slice a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "slice");
  KILN_CHECK(step > 0, "slice: step must be positive, got {}", step);
  const int64_t size = x.sizes()[d];
  // Python slicing: negative bounds count from the end, then both are clamped to [0, size].
  auto clamp_bound = [size](int64_t v) {
    if (v < 0) v = v < -size ? 0 : v + size;
    return std::min(v, size);
  };
  start = clamp_bound(start);
  end = std::max(clamp_bound(end), start);
  Shape sizes = x.sizes(), strides = x.strides();
  sizes[d] = (end - start + step - 1) / step;
  strides[d] = x.strides()[d] * step;
  return mark_view(make_view(x, std::move(sizes), std::move(strides), x.offset() + start * x.strides()[d]), x);
}

Tensor expand_forward(const Tensor& x, const Shape& shape) {
  const int64_t n = static_cast<int64_t>(shape.size()), xd = x.dim();
  KILN_CHECK(n >= xd, "expand: the target shape {} has fewer dims than the tensor's shape {}", shape, x.sizes());
  Shape sizes(n), strides(n);
  for (int64_t i = n - 1; i >= 0; --i) {
    const int64_t j = i - (n - xd);  // the matching input dim, < 0 for a new leading dim
    if (j < 0) {
      KILN_CHECK(shape[i] >= 0, "expand: size {} is not allowed for the new leading dim {} (target shape {}, "
                 "tensor shape {})", shape[i], i, shape, x.sizes());
      sizes[i] = shape[i];
      strides[i] = 0;
      continue;
    }
    const int64_t have = x.sizes()[j];
    const int64_t want = shape[i] == -1 ? have : shape[i];
    KILN_CHECK(want >= 0, "expand: invalid size {} at dim {} of target shape {}", shape[i], i, shape);
    if (want == have) {
      sizes[i] = have;
      strides[i] = x.strides()[j];
    } else {
      KILN_CHECK(have == 1,
                 "expand: the expanded size {} must match the existing size {} at non-singleton dim {} (target "
                 "shape {}, tensor shape {})",
                 want, have, i, shape, x.sizes());
      sizes[i] = want;
      strides[i] = 0;
    }
  }
  return mark_view(make_view(x, std::move(sizes), std::move(strides), x.offset()), x);
}

Tensor cat_forward(const std::vector<Tensor>& tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  const Tensor& first = tensors[0];
  KILN_CHECK(first.defined(), "cat: tensor 0 is undefined");
  KILN_CHECK(first.dim() > 0, "cat: zero-dimensional tensor (at position 0) cannot be concatenated");
  const int64_t d = wrap_dim(dim, first.dim(), "cat");
  DType dtype = first.dtype();
  Shape out_shape = first.sizes();
  out_shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    KILN_CHECK(t.defined(), "cat: tensor {} is undefined", i);
    KILN_CHECK(t.device() == first.device(), "cat: tensor {} is on {} but tensor 0 is on {}", i, t.device(),
               first.device());
    KILN_CHECK(t.dim() == first.dim(), "cat: tensor {} has {} dims (shape {}) but tensor 0 has {} (shape {})", i,
               t.dim(), t.sizes(), first.dim(), first.sizes());
    for (int64_t k = 0; k < t.dim(); ++k)
      KILN_CHECK(k == d || t.sizes()[k] == first.sizes()[k],
                 "cat: sizes must match except in dim {}: tensor {} has shape {} but tensor 0 has shape {}", d, i,
                 t.sizes(), first.sizes());
    dtype = promote_types(dtype, t.dtype());
    out_shape[d] += t.sizes()[d];
  }
  Tensor out = make_tensor(out_shape, dtype, first.device());
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    const int64_t len = t.sizes()[d];
    if (len == 0) continue;
    Shape sizes = out_shape;
    sizes[d] = len;
    Tensor part = make_view(out, std::move(sizes), out.strides(), out.offset() + at * out.strides()[d]);
    kernels::copy[out.device()](part, t);
    at += len;
  }
  return out;
}

std::vector<Tensor> split_with_sizes_forward(const Tensor& x, const IntList& sizes, int64_t dim) {
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(slice_forward(x, dim, at, at + s, 1));
    at += s;
  }
  return out;
}

}  // namespace
}  // namespace kiln

KILN_DEFINE_OP(view, &kiln::view_forward)
KILN_DEFINE_OP(permute, &kiln::permute_forward)
KILN_DEFINE_OP(slice, &kiln::slice_forward)
KILN_DEFINE_OP(expand, &kiln::expand_forward)
KILN_DEFINE_OP(cat, &kiln::cat_forward)
KILN_DEFINE_OP(split_with_sizes, &kiln::split_with_sizes_forward)

namespace kiln {

Tensor view(const Tensor& x, const Shape& shape) { return op::view(x, shape); }

Tensor reshape(const Tensor& x, const Shape& shape) {
  Shape sizes = infer_shape(shape, x.numel(), x.sizes(), "reshape");
  if (compute_view_strides(x.sizes(), x.strides(), sizes)) return op::view(x, sizes);
  return op::view(op::clone(x), sizes);
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1) {
  const int64_t n = x.dim();
  int64_t a = wrap_dim(dim0, n, "transpose"), b = wrap_dim(dim1, n, "transpose");
  IntList dims(n);
  for (int64_t i = 0; i < n; ++i) dims[i] = i;
  if (n > 0) std::swap(dims[a], dims[b]);
  return op::permute(x, dims);
}

Tensor permute(const Tensor& x, const IntList& dims) { return op::permute(x, dims); }

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  KILN_CHECK(x.dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "narrow");
  const int64_t size = x.sizes()[d];
  KILN_CHECK(start >= -size && start <= size, "narrow: start {} is out of range for dim {} of size {} (shape {})",
             start, d, size, x.sizes());
  if (start < 0) start += size;
  KILN_CHECK(length >= 0 && start + length <= size,
             "narrow: start {} + length {} exceeds dim {} of size {} (shape {})", start, length, d, size, x.sizes());
  return op::slice(x, d, start, start + length, 1);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  return op::slice(x, dim, start, end, step);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  KILN_CHECK(x.dim() > 0, "select: cannot select from a 0-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "select");
  const int64_t size = x.sizes()[d];
  KILN_CHECK(index >= -size && index < size, "select: index {} is out of range for dim {} of size {} (shape {})",
             index, d, size, x.sizes());
  if (index < 0) index += size;
  Shape out = x.sizes();
  out.erase(out.begin() + d);
  return op::view(op::slice(x, d, index, index + 1, 1), out);
}

Tensor expand(const Tensor& x, const Shape& shape) { return op::expand(x, shape); }

Tensor squeeze(const Tensor& x) {
  Shape out;
  for (int64_t s : x.sizes())
    if (s != 1) out.push_back(s);
  return op::view(x, out);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  const int64_t d = wrap_dim(dim, x.dim(), "squeeze");
  Shape out = x.sizes();
  if (x.dim() > 0 && out[d] == 1) out.erase(out.begin() + d);
  return op::view(x, out);
}

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  const int64_t d = wrap_dim(dim, x.dim() + 1, "unsqueeze");
  Shape out = x.sizes();
  out.insert(out.begin() + d, 1);
  return op::view(x, out);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  if (x.dim() == 0) return reshape(x, {1});
  const int64_t s = wrap_dim(start_dim, x.dim(), "flatten"), e = wrap_dim(end_dim, x.dim(), "flatten");
  KILN_CHECK(s <= e, "flatten: start_dim {} comes after end_dim {} (shape {})", start_dim, end_dim, x.sizes());
  if (s == e) return x;
  Shape out(x.sizes().begin(), x.sizes().begin() + s);
  int64_t merged = 1;
  for (int64_t i = s; i <= e; ++i) merged *= x.sizes()[i];
  out.push_back(merged);
  out.insert(out.end(), x.sizes().begin() + e + 1, x.sizes().end());
  return reshape(x, out);
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  // Promote here, through the differentiable to(), so that op::cat's backward sees one dtype.
  if (tensors.empty() || !tensors[0].defined()) return op::cat(tensors, dim);
  DType dtype = tensors[0].dtype();
  for (const Tensor& t : tensors)
    if (t.defined()) dtype = promote_types(dtype, t.dtype());
  std::vector<Tensor> same = tensors;
  for (Tensor& t : same)
    if (t.defined() && t.dtype() != dtype) t = op::to_dtype(t, dtype);
  return op::cat(same, dim);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  KILN_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    KILN_CHECK(tensors[i].defined(), "stack: tensor {} is undefined", i);
    KILN_CHECK(tensors[i].sizes() == tensors[0].sizes(),
               "stack: expects each tensor to be of equal shape, but tensor 0 has shape {} and tensor {} has "
               "shape {}",
               tensors[0].sizes(), i, tensors[i].sizes());
  }
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, d));
  return op::cat(parts, d);
}

std::vector<Tensor> split_with_sizes(const Tensor& x, const IntList& sizes, int64_t dim) {
  KILN_CHECK(x.dim() > 0, "split_with_sizes: expects at least a 1-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split_with_sizes");
  int64_t total = 0;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, "split_with_sizes: split sizes must be non-negative, got {}", sizes);
    total += s;
  }
  KILN_CHECK(total == x.sizes()[d],
             "split_with_sizes: split sizes {} sum to {} but dim {} has size {} (shape {})", sizes, total, d,
             x.sizes()[d], x.sizes());
  return op::split_with_sizes(x, sizes, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  KILN_CHECK(x.dim() > 0, "split: expects at least a 1-dim tensor");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  const int64_t size = x.sizes()[d];
  KILN_CHECK(split_size > 0 || (split_size == 0 && size == 0),
             "split: split_size must be positive (0 only for a dim of size 0), got {} for dim {} of size {}",
             split_size, d, size);
  const int64_t n = split_size == 0 ? 1 : std::max<int64_t>((size + split_size - 1) / split_size, 1);
  IntList sizes(n, split_size);
  sizes.back() = size - split_size * (n - 1);
  return split_with_sizes(x, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  KILN_CHECK(x.dim() > 0, "chunk: expects at least a 1-dim tensor");
  KILN_CHECK(chunks > 0, "chunk: chunks must be positive, got {}", chunks);
  const int64_t d = wrap_dim(dim, x.dim(), "chunk");
  const int64_t size = x.sizes()[d];
  // An empty dim still gives `chunks` (empty) pieces, as in PyTorch.
  if (size == 0) return split_with_sizes(x, IntList(chunks, 0), d);
  return split(x, (size + chunks - 1) / chunks, d);
}

// ---- Tensor methods

Tensor Tensor::view(const Shape& shape) const { return kiln::view(*this, shape); }
Tensor Tensor::reshape(const Shape& shape) const { return kiln::reshape(*this, shape); }
Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const { return kiln::transpose(*this, dim0, dim1); }
Tensor Tensor::t() const {
  KILN_CHECK(dim() == 2, "t: expects a 2-D tensor, got shape {} (use transpose() or permute())", sizes());
  return kiln::transpose(*this, 0, 1);
}
Tensor Tensor::permute(const IntList& dims) const { return kiln::permute(*this, dims); }
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return kiln::narrow(*this, dim, start, length);
}
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return kiln::slice(*this, dim, start, end, step);
}
Tensor Tensor::select(int64_t dim, int64_t index) const { return kiln::select(*this, dim, index); }
Tensor Tensor::expand(const Shape& shape) const { return kiln::expand(*this, shape); }
Tensor Tensor::squeeze() const { return kiln::squeeze(*this); }
Tensor Tensor::squeeze(int64_t dim) const { return kiln::squeeze(*this, dim); }
Tensor Tensor::unsqueeze(int64_t dim) const { return kiln::unsqueeze(*this, dim); }
Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  return kiln::flatten(*this, start_dim, end_dim);
}
std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const {
  return kiln::split(*this, split_size, dim);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const { return kiln::chunk(*this, chunks, dim); }

}  // namespace kiln
