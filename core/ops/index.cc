// Indexing ops: index_select, gather, scatter_add, index_add and embedding (differentiable
// primitives) and one_hot. Indices may be i64 or i32 (converted); every index is
// checked against the size of the dim it addresses before a kernel runs, so a bad index throws
// naming the op, the value and the size instead of reading out of bounds.
#include "core/autocast.h"
#include "core/kernels.h"
#include "core/op_table.h"
#include "core/ops.h"

namespace kiln {
namespace {

/// The index as i64 on its device; throws naming `op` for a non-integer index.
Tensor index_as_i64(const Tensor& index, const char* op) {
  KILN_CHECK(index.defined(), "{}: index is undefined", op);
  KILN_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32,
             "{}: index must be an integer tensor (i64 or i32), got dtype {}", op, index.dtype());
  if (index.dtype() == kInt64) return index;
  Tensor out = make_tensor(index.sizes(), kInt64, index.device());
  kernels::copy[index.device()](out, index);
  return out;
}

/// Throws unless every value of `index` (i64) lies in [0, size).
void check_index_range(const Tensor& index, int64_t size, int64_t dim, const char* op) {
  if (index.numel() == 0) return;
  Tensor host = index;
  if (!host.device().is_cpu() || !host.is_contiguous()) {
    host = make_tensor(index.sizes(), kInt64, kCPU);
    if (index.device().is_cpu()) {
      kernels::copy[kCPU](host, index);
    } else {
      Tensor src = index;
      if (!src.is_contiguous()) {
        src = make_tensor(index.sizes(), kInt64, index.device());
        kernels::copy[index.device()](src, index);
      }
      kernels::copy_across_devices[index.device()](host, src);
    }
  }
  const int64_t* p = host.data_ptr<int64_t>();
  const int64_t n = host.numel();
  for (int64_t i = 0; i < n; ++i)
    if (p[i] < 0 || p[i] >= size) fail("{}: index {} is out of bounds for dim {} with size {}", op, p[i], dim, size);
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op, const char* what) {
  KILN_CHECK(a.device() == b.device(), "{}: {} is on {} but the input is on {}", op, what, b.device(), a.device());
}

/// The values added by scatter_add / index_add: same device and dtype as the input.
void check_src(const Tensor& x, const Tensor& src, const char* op) {
  check_same_device(x, src, op, "src");
  KILN_CHECK(src.dtype() == x.dtype(), "{}: src has dtype {} but the input has dtype {}", op, src.dtype(), x.dtype());
}

Tensor clone_plain(const Tensor& x) {
  Tensor out = make_tensor(x.sizes(), x.dtype(), x.device());
  kernels::copy[x.device()](out, x);
  return out;
}

/// index_select and index_add take a 1-D index (a 0-dim one counts as one element).
Tensor vector_index(const Tensor& index, const char* op) {
  Tensor idx = index_as_i64(index, op);
  KILN_CHECK(idx.dim() <= 1, "{}: index must be 1-D, got shape {}", op, idx.sizes());
  if (idx.dim() == 0) idx = make_view(idx, {1}, {1}, idx.offset());
  return idx;
}

Tensor index_select_forward(const Tensor& x, int64_t dim, const Tensor& index) {
  KILN_CHECK(x.dim() > 0, "index_select: the input must have at least one dim");
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  check_same_device(x, index, "index_select", "index");
  Tensor idx = vector_index(index, "index_select");
  check_index_range(idx, x.sizes()[d], d, "index_select");
  Shape shape = x.sizes();
  shape[d] = idx.numel();
  Tensor out = make_tensor(shape, x.dtype(), x.device());
  if (out.numel() > 0) kernels::index_select[x.device()](out, x, d, idx);
  return out;
}

/// gather/scatter_add: index has x's number of dims and fits inside `bound` except along `dim`.
void check_scatter_gather_shapes(const Tensor& x, int64_t dim, const Tensor& index, const Tensor* src,
                                 const char* op) {
  KILN_CHECK(index.dim() == x.dim(), "{}: index has {} dims (shape {}) but the input has {} (shape {})", op,
             index.dim(), index.sizes(), x.dim(), x.sizes());
  for (int64_t k = 0; k < x.dim(); ++k)
    KILN_CHECK(k == dim || index.sizes()[k] <= x.sizes()[k],
               "{}: index shape {} exceeds input shape {} at dim {} (only dim {} may be larger)", op, index.sizes(),
               x.sizes(), k, dim);
  if (src == nullptr) return;
  KILN_CHECK(src->dim() == x.dim(), "{}: src has {} dims (shape {}) but the input has {} (shape {})", op,
             src->dim(), src->sizes(), x.dim(), x.sizes());
  for (int64_t k = 0; k < x.dim(); ++k)
    KILN_CHECK(index.sizes()[k] <= src->sizes()[k], "{}: index shape {} exceeds src shape {} at dim {}", op,
               index.sizes(), src->sizes(), k);
}

/// Kernels address `dim`, so a 0-dim operand (gather/scatter on a scalar) is seen as shape [1].
Tensor as_1d(const Tensor& t) { return t.dim() > 0 ? t : make_view(t, {1}, {1}, t.offset()); }

Tensor gather_forward(const Tensor& x, int64_t dim, const Tensor& index) {
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  check_same_device(x, index, "gather", "index");
  Tensor idx = index_as_i64(index, "gather");
  check_scatter_gather_shapes(x, d, idx, nullptr, "gather");
  check_index_range(idx, as_1d(x).sizes()[d], d, "gather");
  Tensor out = make_tensor(idx.sizes(), x.dtype(), x.device());
  if (out.numel() > 0) {
    Tensor o = as_1d(out);
    kernels::gather[x.device()](o, as_1d(x), d, as_1d(idx));
  }
  return out;
}

Tensor scatter_add_forward(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t d = wrap_dim(dim, x.dim(), "scatter_add");
  check_same_device(x, index, "scatter_add", "index");
  check_src(x, src, "scatter_add");
  Tensor idx = index_as_i64(index, "scatter_add");
  check_scatter_gather_shapes(x, d, idx, &src, "scatter_add");
  check_index_range(idx, as_1d(x).sizes()[d], d, "scatter_add");
  Tensor out = clone_plain(x);
  if (idx.numel() > 0) {
    Tensor o = as_1d(out);
    kernels::scatter_add[x.device()](o, d, as_1d(idx), as_1d(src));
  }
  return out;
}

Tensor index_add_forward(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  KILN_CHECK(x.dim() > 0, "index_add: the input must have at least one dim");
  const int64_t d = wrap_dim(dim, x.dim(), "index_add");
  check_same_device(x, index, "index_add", "index");
  check_src(x, src, "index_add");
  Tensor idx = vector_index(index, "index_add");
  Shape want = x.sizes();
  want[d] = idx.numel();
  KILN_CHECK(src.sizes() == want,
             "index_add: src has shape {} but an input of shape {} with {} indices along dim {} needs shape {}",
             src.sizes(), x.sizes(), idx.numel(), d, want);
  check_index_range(idx, x.sizes()[d], d, "index_add");
  Tensor out = clone_plain(x);
  if (src.numel() > 0) kernels::index_add[x.device()](out, d, idx, src);
  return out;
}

Tensor embedding_forward(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  KILN_CHECK(weight.dim() == 2, "embedding: weight must be 2-D [num_embeddings, dim], got shape {}", weight.sizes());
  KILN_CHECK(padding_idx >= -1 && padding_idx < weight.size(0),
             "embedding: padding_idx {} is out of range for {} embeddings (normalise negative values first)",
             padding_idx, weight.size(0));
  Shape out_shape = indices.sizes();
  out_shape.push_back(weight.size(1));
  Tensor flat = index_as_i64(indices, "embedding");
  flat = flat.is_contiguous() ? make_view(flat, {flat.numel()}, {1}, flat.offset()) : flat.contiguous().view({-1});
  Tensor rows = index_select_forward(weight, 0, flat);
  return make_view(rows, out_shape, contiguous_strides(out_shape), 0);
}

}  // namespace
}  // namespace kiln

KILN_DEFINE_OP(index_select, &kiln::index_select_forward)
KILN_DEFINE_OP(gather, &kiln::gather_forward)
KILN_DEFINE_OP(scatter_add, &kiln::scatter_add_forward)
KILN_DEFINE_OP(index_add, &kiln::index_add_forward)
KILN_DEFINE_OP(embedding, &kiln::embedding_forward)

namespace kiln {

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) { return op::index_select(x, dim, index); }
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) { return op::gather(x, dim, index); }
Tensor scatter_add(const Tensor& x0, int64_t dim, const Tensor& index, const Tensor& src0) {
  std::vector<Tensor> xs = autocast::promote_inputs(AutocastOp::scatter_add, {x0, src0});
  return op::scatter_add(xs[0], dim, index, xs[1]);
}

Tensor index_add(const Tensor& x0, int64_t dim, const Tensor& index, const Tensor& src0) {
  std::vector<Tensor> xs = autocast::promote_inputs(AutocastOp::index_add, {x0, src0});
  return op::index_add(xs[0], dim, index, xs[1]);
}

Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx) {
  return op::embedding(weight, indices, padding_idx);
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  Tensor idx = index_as_i64(indices, "one_hot");
  Tensor host = idx.device().is_cpu() ? idx.contiguous() : idx.to(kCPU).contiguous();
  const int64_t* p = host.data_ptr<int64_t>();
  const int64_t n = host.numel();
  int64_t max_value = -1;
  for (int64_t i = 0; i < n; ++i) {
    KILN_CHECK(p[i] >= 0, "one_hot: class index {} is negative", p[i]);
    max_value = std::max(max_value, p[i]);
  }
  if (num_classes == -1) {
    KILN_CHECK(n > 0, "one_hot: cannot infer the number of classes from an empty tensor (pass num_classes)");
    num_classes = max_value + 1;
  }
  KILN_CHECK(num_classes >= 0, "one_hot: num_classes must be positive or -1, got {}", num_classes);
  KILN_CHECK(max_value < num_classes, "one_hot: class index {} is out of range for {} classes", max_value,
             num_classes);
  Shape shape = idx.sizes();
  shape.push_back(num_classes);
  Tensor out = make_tensor(shape, kInt64, idx.device());
  kernels::fill[out.device()](out, 0);
  if (n == 0) return out;
  Shape idx_shape = idx.sizes();
  idx_shape.push_back(1);
  Tensor pos = make_view(host, idx_shape, contiguous_strides(idx_shape), host.offset());
  if (!idx.device().is_cpu()) pos = pos.to(idx.device());
  Tensor ones_src = make_tensor(idx_shape, kInt64, idx.device());
  kernels::fill[out.device()](ones_src, 1);
  kernels::scatter_add[out.device()](out, static_cast<int64_t>(idx_shape.size()) - 1, pos, ones_src);
  return out;
}

// ---- Tensor methods

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const { return kiln::index_select(*this, dim, index); }
Tensor Tensor::gather(int64_t dim, const Tensor& index) const { return kiln::gather(*this, dim, index); }
Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  return kiln::scatter_add(*this, dim, index, src);
}

}  // namespace kiln
