// amp::AutocastGuard: runs a region of forward code in mixed precision. While a guard is open on
// a thread, the ops of autocast_policy() (core/autocast_policy.h) run as it says (matmul, linear, conv in
// f16/bf16; softmax, norms, reductions, exp/log/pow and losses in f32); all others follow their
// inputs. Device-agnostic: the same policy applies to every device's tensors.
#pragma once

#include "core/autocast.h"

namespace kiln::amp {

/// Autocast on for `dtype` (kFloat16 or kBFloat16) until the end of the scope, as
/// torch.autocast. Guards nest; `enabled = false` turns autocast off inside an outer guard. A
/// weight cast to the lower precision is cached and reused until it changes or the outermost
/// guard closes, so open one guard per training step around the forward pass (and the loss).
/// backward() may be called inside or outside: it always runs without autocast.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype = kBFloat16, bool enabled = true);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  autocast::State prev_;
};

/// True while an AutocastGuard has autocast on on this thread.
inline bool is_autocast_enabled() { return autocast::is_enabled(); }
/// The lower precision of the innermost guard.
inline DType autocast_dtype() { return autocast::lower_dtype(); }

}  // namespace kiln::amp
