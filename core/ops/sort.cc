// Sorting and scans. sort/argsort/topk: the order comes from the argsort kernel (stable; NaN
// sorts as the largest value), the values from gather, so the gradient is gather's (a
// scatter-add back to the chosen positions). cumsum/cumprod are Hillis-Steele scans of add/mul
// over shifted copies (log2(n) passes), exact on every backend and differentiable through
// those primitives, including cumprod at zeros.
#include <tuple>

#include "core/kernels.h"
#include "core/ops.h"

namespace kiln {
namespace {

/// The stable sort order of x along `dim` (i64, x's shape).
Tensor sort_order(const Tensor& x, int64_t dim, bool descending, const char* op) {
  if (x.dim() == 0) return zeros({}, TensorOptions(kInt64).device(x.device()));
  const int64_t d = wrap_dim(dim, x.dim(), op);
  Tensor rows = x.transpose(d, -1).contiguous();
  Tensor order = make_tensor(rows.sizes(), kInt64, x.device());
  if (rows.numel() > 0) kernels::argsort[x.device()](order, rows, descending);
  return order.transpose(d, -1);
}

/// cumsum / cumprod by doubling: after the pass with shift s, y[i] combines x[i-2s+1 .. i].
template <class Combine> Tensor scan(const Tensor& x, int64_t dim, const char* op, double identity, Combine combine) {
  if (x.dim() == 0) return x.clone();
  const int64_t d = wrap_dim(dim, x.dim(), op);
  const int64_t n = x.size(d);
  Tensor y = x.clone();
  for (int64_t s = 1; s < n; s *= 2) {
    Shape pad_shape = y.sizes();
    pad_shape[d] = s;
    Tensor shifted = cat({full(pad_shape, identity, TensorOptions(y.dtype()).device(y.device())), y.narrow(d, 0, n - s)}, d);
    y = combine(y, shifted);
  }
  return y;
}

}  // namespace

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  Tensor order = sort_order(x, dim, descending, "sort");
  if (x.dim() == 0) return {x.clone(), order};
  return {x.gather(wrap_dim(dim, x.dim(), "sort"), order), order};
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) { return sort_order(x, dim, descending, "argsort"); }

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  const int64_t d = x.dim() == 0 ? 0 : wrap_dim(dim, x.dim(), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  KILN_CHECK(k >= 0 && k <= n, "topk: k ({}) is out of range for dim {} of size {}", k, d, n);
  (void)sorted;  // always sorted: the order comes from a full sort
  Tensor order = sort_order(x, d, largest, "topk");
  if (x.dim() == 0) return {x.clone(), order};
  Tensor idx = order.narrow(d, 0, k);
  return {x.gather(d, idx), idx.contiguous()};
}

Tensor cumsum(const Tensor& x, int64_t dim) {
  KILN_CHECK(x.dtype() != kBool, "cumsum: bool input is not supported (convert it to an integer type first)");
  return scan(x, dim, "cumsum", 0.0, [](const Tensor& a, const Tensor& b) { return a + b; });
}

Tensor cumprod(const Tensor& x, int64_t dim) {
  KILN_CHECK(x.dtype() != kBool, "cumprod: bool input is not supported (convert it to an integer type first)");
  return scan(x, dim, "cumprod", 1.0, [](const Tensor& a, const Tensor& b) { return a * b; });
}

Tensor Tensor::cumsum(int64_t dim) const { return kiln::cumsum(*this, dim); }
Tensor Tensor::cumprod(int64_t dim) const { return kiln::cumprod(*this, dim); }
Tensor Tensor::argsort(int64_t dim, bool descending) const { return kiln::argsort(*this, dim, descending); }

}  // namespace kiln
