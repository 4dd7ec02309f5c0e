#include "core/ops/inplace.h"

#include "core/autograd_meta.h"
#include "core/grad_mode.h"
#include "core/kernels.h"
#include "core/view_history.h"

namespace kiln {

void check_inplace(const Tensor& x, const char* op) {
  const bool grad_mode = GradMode::is_enabled();
  KILN_CHECK(!(grad_mode && x.requires_grad() && x.is_leaf()),
             "{}: a leaf tensor of shape {} that requires grad cannot be modified in place while grad mode "
             "is on (wrap the update in kiln::NoGradGuard)",
             op, x.sizes());
  if (grad_mode && x.unsafe_impl()->view_base) {
    Tensor base(x.unsafe_impl()->view_base);
    KILN_CHECK(!(base.is_leaf() && base.requires_grad()),
               "{}: a view (shape {}) of a leaf tensor of shape {} that requires grad cannot be modified in "
               "place while grad mode is on (wrap the update in kiln::NoGradGuard, or clone() the view)",
               op, x.sizes(), base.sizes());
    KILN_CHECK(x.unsafe_impl()->view_tracks_grad || !base.requires_grad(),
               "{}: this view (shape {}) was made in no-grad mode from a tensor of shape {} that requires grad; "
               "writing it in place with grad mode on would hide the write from autograd (make the view with "
               "grad mode on, or write under kiln::NoGradGuard)",
               op, x.sizes(), base.sizes());
  }
  for (int64_t d = 0; d < x.dim(); ++d)
    KILN_CHECK(x.stride(d) != 0 || x.size(d) <= 1,
               "{}: cannot write in place into an expanded tensor of shape {} (strides {}): several elements "
               "share one memory location; clone() it first",
               op, x.sizes(), x.strides());
}

bool inplace_needs_grad(const Tensor& x, const Tensor& other) {
  return GradMode::is_enabled() && (x.requires_grad() || (other.defined() && other.requires_grad()));
}

void commit_inplace(Tensor& self, const Tensor& result, const char* op) {
  KILN_CHECK(result.sizes() == self.sizes(), "{}: internal error: result shape {} for a tensor of shape {}", op,
             result.sizes(), self.sizes());
  {
    NoGradGuard g;
    Tensor r = result.dtype() == self.dtype() ? result : result.to(self.dtype());
    if (r.device() != self.device()) r = r.to(self.device());
    if (r.storage() == self.storage()) r = r.clone();  // never read an element after writing it
    kernels::copy[self.device()](self, r);
    self.storage()->bump_version();
  }
  auto rebase = detail::view_history_hooks().rebase;
  KILN_CHECK(rebase != nullptr, "{}: autograd is not linked (link //autograd to record in-place ops)", op);
  rebase(self, result, op);
}

}  // namespace kiln

