// The fused cross_entropy primitive: per-row loss of [N, C] logits against i64 class targets,
// with ignore_index and label smoothing (torch.nn.functional.cross_entropy with reduction none).
// Validation and dispatch only; the kernels are in core/cpu/cross_entropy_kernels.cc and
// cuda/cross_entropy.cc, the backward in autograd/functions/cross_entropy.cc.
#include "core/kernels.h"
#include "core/ops/cross_entropy.h"
#include "core/op_table.h"
#include "core/ops.h"

namespace kiln {
namespace {

void check_cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing) {
  KILN_CHECK(logits.defined() && target.defined(), "cross_entropy: logits and target must be defined tensors");
  KILN_CHECK(logits.dim() == 2, "cross_entropy: expected logits [N, C], got shape {}", logits.sizes());
  KILN_CHECK(is_floating(logits.dtype()), "cross_entropy: logits dtype {} is not supported (floating types only)",
             logits.dtype());
  KILN_CHECK(target.dtype() == kInt64, "cross_entropy: target must be i64 class indices, got dtype {}",
             target.dtype());
  KILN_CHECK(target.dim() == 1 && target.size(0) == logits.size(0),
             "cross_entropy: target shape {} does not match logits shape {} (expected [{}])", target.sizes(),
             logits.sizes(), logits.size(0));
  KILN_CHECK(logits.device() == target.device(), "cross_entropy: logits are on {} but target is on {}",
             logits.device(), target.device());
  KILN_CHECK(logits.size(1) > 0 || logits.size(0) == 0, "cross_entropy: logits shape {} has no classes",
             logits.sizes());
  KILN_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing must be in [0, 1], got {}",
             label_smoothing);
}

Tensor cross_entropy_forward(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                             double label_smoothing) {
  return std::get<0>(cross_entropy_with_lse(logits, target, ignore_index, label_smoothing));
}

}  // namespace

std::tuple<Tensor, Tensor> cross_entropy_with_lse(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                                  double label_smoothing) {
  check_cross_entropy(logits, target, label_smoothing);
  const int64_t n = logits.size(0);
  Tensor loss = make_tensor({n}, logits.dtype(), logits.device());
  Tensor lse = make_tensor({n}, logits.dtype(), logits.device());
  if (n == 0) return {loss, lse};
  const Tensor lc = logits.is_contiguous() ? logits : logits.contiguous();
  const Tensor tc = target.is_contiguous() ? target : target.contiguous();
  kernels::cross_entropy[logits.device()](loss, lse, lc, tc, ignore_index, label_smoothing);
  return {loss, lse};
}

}  // namespace kiln

KILN_DEFINE_OP(cross_entropy, &kiln::cross_entropy_forward)
