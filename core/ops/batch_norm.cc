// batch_norm in training mode as one primitive: validation (errors name the op and the
// offending shape, dtype or value), the contiguous input the kernels expect, and dispatch.
// Statistics are over every dim but 1 of x [N, C, *]. A 16-bit x may come with f32 weight and
// bias (what master-weight training produces); otherwise they share x's dtype. autograd/functions/batch_norm.cc holds the backward.
#include "core/ops/batch_norm.h"

#include <cmath>

#include "core/kernels.h"
#include "core/op_table.h"
#include "core/ops.h"

namespace kiln {
namespace {

bool is_16bit(DType t) { return t == kFloat16 || t == kBFloat16; }

/// weight or bias: [C], on x's device, x's dtype or (16-bit x) f32. Running statistics may have
/// any floating dtype (they are only read and written back, as the composite form allowed).
void check_param(const Tensor& p, const Tensor& x, const char* what, bool any_floating = false) {
  if (!p.defined()) return;
  const int64_t c = x.size(1);
  KILN_CHECK(p.dim() == 1 && p.size(0) == c,
             "batch_norm: expected {} of shape [{}] (one per channel of input {}), got shape {}", what, c,
             x.sizes(), p.sizes());
  KILN_CHECK(p.device() == x.device(), "batch_norm: {} is on {} but input is on {}", what, p.device(), x.device());
  if (any_floating) {
    KILN_CHECK(is_floating(p.dtype()), "batch_norm: {} dtype {} is not floating", what, p.dtype());
    return;
  }
  KILN_CHECK(p.dtype() == x.dtype() || (is_16bit(x.dtype()) && p.dtype() == kFloat32),
             "batch_norm: {} dtype {} does not go with input dtype {} (expected {}{})", what, p.dtype(), x.dtype(),
             x.dtype(), is_16bit(x.dtype()) ? " or f32" : "");
}

void check_batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                      const Tensor& running_var, double momentum, double eps) {
  KILN_CHECK(x.defined(), "batch_norm: input is an undefined tensor");
  KILN_CHECK(x.dim() >= 2, "batch_norm: input must be at least 2-D [N, C, ...], got shape {}", x.sizes());
  KILN_CHECK(is_floating(x.dtype()), "batch_norm: input dtype {} is not supported (floating types only)",
             x.dtype());
  const int64_t c = x.size(1);
  if (c > 0)
    KILN_CHECK(x.numel() / c > 1, "batch_norm: expected more than 1 value per channel when training, got input shape {}",
               x.sizes());
  KILN_CHECK(running_mean.defined() == running_var.defined(),
             "batch_norm: running_mean and running_var must be both defined or both undefined (got {} and {})",
             running_mean.defined() ? "defined" : "undefined", running_var.defined() ? "defined" : "undefined");
  check_param(weight, x, "weight");
  check_param(bias, x, "bias");
  check_param(running_mean, x, "running_mean", /*any_floating=*/true);
  check_param(running_var, x, "running_var", /*any_floating=*/true);
  KILN_CHECK(std::isfinite(momentum), "batch_norm: momentum must be finite, got {}", momentum);
  KILN_CHECK(eps >= 0 && std::isfinite(eps), "batch_norm: eps must be non-negative and finite, got {}", eps);
}

Tensor as_contiguous(const Tensor& t) { return !t.defined() || t.is_contiguous() ? t : t.contiguous(); }

Tensor batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                          Tensor running_var, double momentum, double eps) {
  return std::get<0>(batch_norm_training(x, weight, bias, running_mean, running_var, momentum, eps));
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> batch_norm_training(const Tensor& x0, const Tensor& weight, const Tensor& bias,
                                                       Tensor running_mean, Tensor running_var, double momentum,
                                                       double eps) {
  check_batch_norm(x0, weight, bias, running_mean, running_var, momentum, eps);
  // Detached: the kernels read values only (the autograd wrapper records the graph).
  const Tensor x = as_contiguous(x0.detach());
  const int64_t c = x.size(1);
  const DType sd = batch_norm_stats_dtype(x.dtype());
  Tensor out = make_tensor(x.sizes(), x.dtype(), x.device());
  Tensor save_mean = make_tensor({c}, sd, x.device()), save_invstd = make_tensor({c}, sd, x.device());
  if (x.numel() == 0) return {out, save_mean, save_invstd};
  Tensor rm = running_mean.defined() ? running_mean.detach() : Tensor();
  Tensor rv = running_var.defined() ? running_var.detach() : Tensor();
  kernels::batch_norm[x.device()](out, save_mean, save_invstd, x, as_contiguous(weight.defined() ? weight.detach() : weight),
                                  as_contiguous(bias.defined() ? bias.detach() : bias), rm, rv, momentum, eps);
  // An in-place write, as far as autograd's saved-tensor checks are concerned.
  if (rm.defined()) rm.storage()->bump_version();
  if (rv.defined()) rv.storage()->bump_version();
  return {out, save_mean, save_invstd};
}

}  // namespace kiln

KILN_DEFINE_OP(batch_norm, &kiln::batch_norm_forward)
