#include "core/dense.h"

#include "core/kernels.h"

namespace kiln {

Tensor dense(const Tensor& t) { return t.defined() ? dense_as(t, t.dtype()) : t; }

Tensor dense_as(const Tensor& t, DType dt) {
  if (!t.defined() || (t.is_contiguous() && t.dtype() == dt)) return t;
  Tensor c = make_tensor(t.sizes(), dt, t.device());
  kernels::copy[t.device()](c, t);
  return c;
}

Tensor writable(const Tensor& out) { return out.defined() ? writable_as(out, out.dtype()) : out; }

Tensor writable_as(const Tensor& out, DType dt) {
  if (!out.defined() || (out.is_contiguous() && out.dtype() == dt)) return out;
  return make_tensor(out.sizes(), dt, out.device());
}

void write_back(Tensor& out, const Tensor& written) {
  if (out.defined() && !written.is_same(out)) kernels::copy[out.device()](out, written);
}

}  // namespace kiln
