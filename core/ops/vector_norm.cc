// Vector norms (torch.linalg.vector_norm, torch.norm for vectors) composed of reductions. The
// p-norm's root is taken so that an all-zero slice has gradient 0 (PyTorch's subgradient), not
// the 0/0 = NaN a plain sqrt(sum(x^2)) would give.
#include <cmath>
#include <limits>

#include "core/ops.h"

namespace kiln {

namespace linalg {

Tensor vector_norm(const Tensor& x, double ord, const IntList& dims, bool keepdim) {
  KILN_CHECK(is_floating(x.dtype()), "vector_norm: expected a floating tensor, got dtype {}", x.dtype());
  if (std::isinf(ord)) return ord > 0 ? amax(abs(x), dims, keepdim) : amin(abs(x), dims, keepdim);
  if (ord == 0) return sum((x != Scalar(0)).to(x.dtype()), dims, keepdim);
  KILN_CHECK(ord > 0, "vector_norm: order {} is not supported (use a positive order, 0 or +-inf)", ord);
  Tensor powered = ord == 2 ? x * x : ord == 1 ? abs(x) : pow(abs(x), ord);
  Tensor s = sum(powered, dims, keepdim);
  if (ord == 1) return s;
  Tensor zero = s == Scalar(0);
  Tensor safe = where(zero, 1.0, s);  // the root's derivative is infinite at 0: keep it out of the graph
  Tensor root = ord == 2 ? sqrt(safe) : pow(safe, 1.0 / ord);
  return where(zero, 0.0, root);
}

}  // namespace linalg

Tensor norm(const Tensor& x, double p, const IntList& dims, bool keepdim) {
  return linalg::vector_norm(x, p, dims, keepdim);
}

Tensor Tensor::norm(double p, const IntList& dims, bool keepdim) const { return kiln::norm(*this, p, dims, keepdim); }

}  // namespace kiln
