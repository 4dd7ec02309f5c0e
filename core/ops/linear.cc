// linear: y = x @ w^T + b as one primitive. Its backward writes the weight gradient [out, in]
// directly (no transposed views to copy), which is what training an MLP spends its time on.
#include "core/kernels.h"
#include "core/op_table.h"
#include "core/ops.h"

namespace kiln {
namespace {

Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias) {
  KILN_CHECK(w.dim() == 2, "linear: weight must be 2-D [out, in], got shape {}", w.sizes());
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == w.size(1),
             "linear: input shape {} does not end in in_features={} (weight shape {})", x.sizes(), w.size(1),
             w.sizes());
  KILN_CHECK(x.dtype() == w.dtype() && (!bias.defined() || bias.dtype() == w.dtype()),
             "linear: input {}, weight {} and bias dtypes must match", x.dtype(), w.dtype());
  KILN_CHECK(x.device() == w.device() && (!bias.defined() || bias.device() == w.device()),
             "linear: input, weight and bias must be on one device (got {} and {})", x.device(), w.device());
  if (bias.defined())
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), "linear: bias shape {} does not match out_features={}",
               bias.sizes(), w.size(0));
  const int64_t in = w.size(1), out_features = w.size(0);
  const int64_t rows = x.numel() / std::max<int64_t>(in, 1);
  Shape out_shape = x.sizes();
  out_shape.back() = out_features;
  Tensor out = make_tensor(out_shape, x.dtype(), x.device());
  if (out.numel() == 0) return out;
  if (kernels::linear.has(x.device().type) && x.is_contiguous() && w.is_contiguous() &&
      (!bias.defined() || bias.is_contiguous()) && in > 0) {
    Tensor out2 = make_view(out, {rows, out_features}, {out_features, 1}, 0);
    kernels::linear[x.device()](out2, x.reshape({rows, in}), w, bias);
    return out;
  }
  Tensor x2 = x.reshape({1, rows, in});
  Tensor out3 = make_view(out, {1, rows, out_features}, {rows * out_features, out_features, 1}, 0);
  Tensor wt = make_view(w, {1, in, out_features}, {in * out_features, w.stride(1), w.stride(0)}, w.offset());
  kernels::bmm[x.device()](out3, x2, wt);
  if (bias.defined()) {
    Tensor b = make_view(bias, {1, rows, out_features}, {0, 0, bias.stride(0)}, bias.offset());
    kernels::binary[x.device()](BinaryKind::add, out3, out3, b);
  }
  return out;
}

}  // namespace
}  // namespace kiln

KILN_DEFINE_OP(linear, &kiln::linear_forward)
