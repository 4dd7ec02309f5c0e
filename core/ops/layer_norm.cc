// The fused layer_norm primitive: x normalized over its last `normalized_dims` dims, then scaled
// and shifted by weight and bias when defined (torch.nn.functional.layer_norm). x is viewed as
// [M, N] rows for the kernels (core/cpu/layer_norm_kernels.cc, cuda/layer_norm.cc); the backward
// is in autograd/functions/layer_norm.cc.
#include "core/kernels.h"
#include "core/ops/layer_norm.h"
#include "core/op_table.h"
#include "core/ops.h"

namespace kiln {
namespace {

void check_affine(const Tensor& p, const char* what, const Tensor& x, const Shape& normalized) {
  if (!p.defined()) return;
  KILN_CHECK(p.sizes() == normalized, "layer_norm: {} shape {} differs from the normalized shape {} of input {}",
             what, p.sizes(), normalized, x.sizes());
  KILN_CHECK(p.dtype() == x.dtype(), "layer_norm: {} dtype {} differs from input dtype {}", what, p.dtype(),
             x.dtype());
  KILN_CHECK(p.device() == x.device(), "layer_norm: {} is on {} but input is on {}", what, p.device(), x.device());
}

Tensor layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, int64_t normalized_dims,
                          double eps) {
  return std::get<0>(layer_norm_with_stats(x, weight, bias, normalized_dims, eps));
}

/// A contiguous [n] view of an affine parameter (a copy if it is strided).
Tensor flat(const Tensor& p, int64_t n) {
  if (!p.defined()) return p;
  return (p.is_contiguous() ? p : p.contiguous()).reshape({n});
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> layer_norm_with_stats(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                                         int64_t normalized_dims, double eps) {
  KILN_CHECK(x.defined(), "layer_norm: input is an undefined tensor");
  KILN_CHECK(normalized_dims >= 1 && normalized_dims <= x.dim(),
             "layer_norm: normalized_dims={} does not fit input shape {}", normalized_dims, x.sizes());
  KILN_CHECK(is_floating(x.dtype()), "layer_norm: dtype {} is not supported (floating types only)", x.dtype());
  KILN_CHECK(eps >= 0, "layer_norm: eps must be non-negative, got {}", eps);
  const Shape normalized(x.sizes().end() - normalized_dims, x.sizes().end());
  check_affine(weight, "weight", x, normalized);
  check_affine(bias, "bias", x, normalized);
  int64_t n = 1;
  for (int64_t s : normalized) n *= s;
  const int64_t m = n == 0 ? 0 : x.numel() / n;
  Tensor out = make_tensor(x.sizes(), x.dtype(), x.device());
  const DType sd = layer_norm_stats_dtype(x.dtype());
  Tensor mean = make_tensor({m}, sd, x.device()), rstd = make_tensor({m}, sd, x.device());
  if (x.numel() == 0) return {out, mean, rstd};
  const Tensor x2 = (x.is_contiguous() ? x : x.contiguous()).reshape({m, n});
  Tensor out2 = out.reshape({m, n});
  kernels::layer_norm[x.device()](out2, mean, rstd, x2, flat(weight, n), flat(bias, n), eps);
  return {out, mean, rstd};
}

}  // namespace kiln

KILN_DEFINE_OP(layer_norm, &kiln::layer_norm_forward)
