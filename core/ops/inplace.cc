#include "core/ops/inplace.h"

#include "core/autograd_meta.h"
#include "core/grad_mode.h"
#include "core/kernels.h"

namespace kiln {

void check_inplace(const Tensor& x, const char* op) {
  KILN_CHECK(!(GradMode::is_enabled() && x.requires_grad() && x.is_leaf()),
             "{}: a leaf tensor of shape {} that requires grad cannot be modified in place while grad mode "
             "is on (wrap the update in kiln::NoGradGuard)",
             op, x.sizes());
  // Rebasing a view's history would also have to rewrite its base's; we refuse instead.
  KILN_CHECK(!(GradMode::is_enabled() && x.unsafe_impl()->is_view && x.requires_grad()),
             "{}: in-place modification of a view of a tensor that requires grad is not supported (view of "
             "shape {}); clone() it first",
             op, x.sizes());
  for (int64_t d = 0; d < x.dim(); ++d)
    KILN_CHECK(x.stride(d) != 0 || x.size(d) <= 1,
               "{}: cannot write in place into an expanded tensor of shape {} (strides {}): several elements "
               "share one memory location; clone() it first",
               op, x.sizes(), x.strides());
}

bool inplace_needs_grad(const Tensor& x, const Tensor& other) {
  return GradMode::is_enabled() && (x.requires_grad() || (other.defined() && other.requires_grad()));
}

void rebase_history(Tensor& self, const Tensor& result) {
  // The base of a view would not learn of the new history, and its gradient would silently
  // miss this op: refuse (before anything is written).
  KILN_CHECK(!(result.requires_grad() && self.unsafe_impl()->is_view),
             "in-place op with an operand that requires grad cannot write into a view (shape {}); compute it "
             "out of place, or clone() the view first",
             self.sizes());
  {
    NoGradGuard g;
    Tensor r = result.dtype() == self.dtype() ? result : result.to(self.dtype());
    kernels::copy[self.device()](self, r);
    self.storage()->bump_version();
  }
  if (!result.requires_grad()) return;
  AutogradMeta& m = self.mutable_autograd_meta();
  m.grad_fn = result.grad_fn();
  m.output_nr = result.autograd_meta()->output_nr;
  m.grad_hooks = result.autograd_meta()->grad_hooks;  // hooks registered later reach the new node
}

}  // namespace kiln
