// Matrix products: the `bmm` primitive (3-D, same dtype; autograd/ holds its backward) and
// mm/matmul composed from it with views, so their gradients come free. matmul follows
// torch.matmul: 1-D operands are promoted and the added dim removed again, batch dims broadcast.
// Under autocast all three run in the lower precision (core/autocast_policy.h).
#include "core/autocast.h"
#include "core/kernels.h"
#include "core/op_table.h"
#include "core/ops.h"

namespace kiln {
namespace {

void check_pair(const Tensor& a, const Tensor& b, const char* op) {
  KILN_CHECK(a.dtype() == b.dtype(), "{}: expected both operands to have the same dtype, got {} and {}", op,
             a.dtype(), b.dtype());
  KILN_CHECK(a.device() == b.device(), "{}: expected both operands on the same device, got {} and {}", op,
             a.device(), b.device());
}

[[noreturn]] void fail_shapes(const char* op, int64_t m, int64_t k1, int64_t k2, int64_t n) {
  fail("{}: mat1 and mat2 shapes cannot be multiplied ({}x{} and {}x{})", op, m, k1, k2, n);
}

Tensor bmm_forward(const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors, got shapes {} and {}", a.sizes(), b.sizes());
  check_pair(a, b, "bmm");
  KILN_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ: {} and {} (shapes {} and {})", a.size(0), b.size(0),
             a.sizes(), b.sizes());
  if (a.size(2) != b.size(1)) fail_shapes("bmm", a.size(1), a.size(2), b.size(1), b.size(2));
  Tensor out = make_tensor({a.size(0), a.size(1), b.size(2)}, a.dtype(), a.device());
  if (out.numel() > 0) kernels::bmm[a.device()](out, a, b);
  return out;
}

/// A [..., r, c] operand as [n_batch, r, c] for the broadcast batch shape `batch`: a view when
/// its own batch dims already match or are all 1 (then expanded with stride 0), else a copy.
Tensor as_batch3(const Tensor& t, const Shape& batch, int64_t n_batch) {
  const int64_t r = t.size(-2), c = t.size(-1);
  const Shape own(t.sizes().begin(), t.sizes().end() - 2);
  if (own == batch) return t.reshape({n_batch, r, c});
  if (shape_numel(own) == 1) return t.reshape({1, r, c}).expand({n_batch, r, c});
  Shape full = batch;
  full.push_back(r);
  full.push_back(c);
  return t.expand(full).reshape({n_batch, r, c});
}

}  // namespace
}  // namespace kiln

KILN_DEFINE_OP(bmm, &kiln::bmm_forward)

namespace kiln {

Tensor bmm(const Tensor& a, const Tensor& b) {
  return op::bmm(autocast::cast_input(AutocastOp::bmm, a), autocast::cast_input(AutocastOp::bmm, b));
}

Tensor mm(const Tensor& a0, const Tensor& b0) {
  const Tensor a = autocast::cast_input(AutocastOp::mm, a0), b = autocast::cast_input(AutocastOp::mm, b0);
  KILN_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D tensors, got shapes {} and {}", a.sizes(), b.sizes());
  check_pair(a, b, "mm");
  if (a.size(1) != b.size(0)) fail_shapes("mm", a.size(0), a.size(1), b.size(0), b.size(1));
  return op::bmm(a.unsqueeze(0), b.unsqueeze(0)).squeeze(0);
}

Tensor matmul(const Tensor& a0, const Tensor& b0) {
  const Tensor a = autocast::cast_input(AutocastOp::matmul, a0), b = autocast::cast_input(AutocastOp::matmul, b0);
  const int64_t da = a.dim(), db = b.dim();
  KILN_CHECK(da >= 1 && db >= 1, "matmul: both arguments need at least 1 dimension, got shapes {} and {}",
             a.sizes(), b.sizes());
  check_pair(a, b, "matmul");
  // As matrices: a 1-D a is a row [1, K], a 1-D b a column [K, 1].
  const int64_t m = da == 1 ? 1 : a.size(-2), k1 = a.size(-1);
  const int64_t k2 = db == 1 ? b.size(0) : b.size(-2), n = db == 1 ? 1 : b.size(-1);
  if (k1 != k2) fail_shapes("matmul", m, k1, k2, n);

  if (da == 1 && db == 1) return op::bmm(a.reshape({1, 1, k1}), b.reshape({1, k1, 1})).reshape({});
  if (da <= 2 && db <= 2) {
    Tensor A = da == 1 ? a.unsqueeze(0) : a, B = db == 1 ? b.unsqueeze(1) : b;
    Tensor r = mm(A, B);
    if (da == 1) r = r.squeeze(0);
    if (db == 1) r = r.squeeze(-1);
    return r;
  }
  if (da >= 3 && db <= 2) {
    // Fold a's batch dims into its rows: one [P, K] @ [K, N] product, b never copied.
    Shape out(a.sizes().begin(), a.sizes().end() - 1);
    const int64_t rows = shape_numel(out);
    if (db == 2) out.push_back(n);
    Tensor r = mm(a.reshape({rows, k1}), db == 1 ? b.unsqueeze(1) : b);
    return r.reshape(out);
  }
  Tensor A = da == 1 ? a.unsqueeze(0) : a, B = db == 1 ? b.unsqueeze(1) : b;
  const Shape batch = broadcast_shapes(Shape(A.sizes().begin(), A.sizes().end() - 2),
                                       Shape(B.sizes().begin(), B.sizes().end() - 2), "matmul");
  const int64_t nb = shape_numel(batch);
  Tensor r = op::bmm(as_batch3(A, batch, nb), as_batch3(B, batch, nb));
  Shape out = batch;
  if (da > 1) out.push_back(m);
  if (db > 1) out.push_back(n);
  return r.reshape(out);
}

Tensor Tensor::matmul(const Tensor& other) const { return kiln::matmul(*this, other); }

}  // namespace kiln

namespace kiln {
namespace {

/// beta * input + alpha * prod, input broadcast to prod's shape. With beta == 0 the input is
/// ignored, as in PyTorch (NaN and inf in it do not propagate).
Tensor scaled_sum(const Tensor& input, Tensor prod, const Scalar& beta, const Scalar& alpha, const char* op) {
  KILN_CHECK(broadcast_shapes(input.sizes(), prod.sizes(), op) == prod.sizes(),
             "{}: input of shape {} cannot be broadcast to the product's shape {}", op, input.sizes(), prod.sizes());
  if (alpha.to_double() != 1) prod = prod * alpha;
  if (beta.to_double() == 0) return prod;
  return (beta.to_double() == 1 ? input : input * beta) + prod;
}

}  // namespace

Tensor addmm(const Tensor& input, const Tensor& mat1, const Tensor& mat2, const Scalar& beta, const Scalar& alpha) {
  return scaled_sum(input, mm(mat1, mat2), beta, alpha, "addmm");
}

Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, const Scalar& beta,
               const Scalar& alpha) {
  return scaled_sum(input, bmm(batch1, batch2), beta, alpha, "baddbmm");
}

}  // namespace kiln
