// Global gradient-norm clipping across ranks; see clip_grad_norm.h.
#include "distributed/data_parallel/clip_grad_norm.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "optim/clip.h"

namespace kiln::dist {

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, ProcessGroup& pg, double norm_type) {
  KILN_CHECK(norm_type > 0, "dist::clip_grad_norm_: norm_type must be positive, got {}", norm_type);
  const bool inf_norm = std::isinf(norm_type);
  // This rank's norm, without clipping (an infinite max_norm never scales).
  const double local = optim::clip_grad_norm_(params, std::numeric_limits<double>::infinity(), norm_type);
  Device dev = kCPU;
  for (const Tensor& p : params)
    if (p.grad().defined()) {
      if (pg.backend() == "nccl") dev = p.grad().device();
      break;
    }
  Tensor acc = full({1}, inf_norm ? local : std::pow(local, norm_type), dtype(kFloat64).device(dev));
  pg.allreduce(acc, inf_norm ? ReduceOp::kMax : ReduceOp::kSum)->wait();
  const double sum = acc.item<double>();
  const double total = inf_norm ? sum : std::pow(sum, 1.0 / norm_type);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1 || std::isnan(coef)) {  // as optim::clip_grad_norm_
    NoGradGuard no_grad;
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) g.mul_(coef);
    }
  }
  return total;
}

}  // namespace kiln::dist
