// Autocast's thread-local state and the casts the public op entry points apply: the dispatch
// hook in core that amp::AutocastGuard (amp/autocast.h) switches on. An entry point of an op in
// the policy table (core/autocast_policy.h) passes its tensor inputs through cast_input (or
// promote_inputs) before computing, as the elementwise entry points do for every kind (the
// registry's `amp` column); with autocast off that is the input itself.
// Promises: casts are differentiable (gradients flow back in the input's own dtype); within one
// guard a leaf that requires grad (a weight) is cast to the lower dtype once and the cast reused
// until the weight changes (its version counter moves) or the outermost guard exits.
#pragma once

#include <cstddef>
#include <vector>

#include "core/autocast_policy.h"
#include "core/elementwise_ops.h"
#include "core/tensor.h"

namespace kiln::autocast {

struct State {
  bool enabled = false;
  DType dtype = kBFloat16;  // the lower precision: f16 or bf16
  int depth = 0;            // nesting of guards that entered (the weight cache lives while > 0)
  bool suspended = false;   // set by SuspendGuard (the backward engine): casts pass through
};

/// This thread's state (amp::AutocastGuard saves and restores it).
State state();
void set_state(const State& s);
/// True while a guard has autocast on and nothing suspended it.
bool is_enabled();
/// The lower precision in force (meaningful while is_enabled()).
DType lower_dtype();

/// `t` as the policy class of `op` wants it: cast to the lower dtype (lower), f16/bf16 up to f32
/// (fp32), or unchanged (autocast off, undefined or non-floating tensors, f64 under lower).
Tensor cast_input(AutocastOp op, const Tensor& t);
/// The same for an elementwise kind, by its row's `amp` column: f16/bf16 up to f32 for `fp32`
/// kinds, unchanged for `keep` ones. core's unary and binary entry points call it for every kind.
Tensor cast_input(UnaryKind kind, const Tensor& t);
Tensor cast_input(BinaryKind kind, const Tensor& t);
/// For a promote-class op: every defined floating tensor cast to the widest floating dtype among
/// them (unchanged when autocast is off).
std::vector<Tensor> promote_inputs(AutocastOp op, std::vector<Tensor> ts);

/// Drops the cached weight casts of this thread (the outermost guard's exit does this).
void clear_cache();
/// Number of cached weight casts (for tests).
size_t cache_size();

/// Turns autocast off in a scope without touching the guard state: the backward engine runs
/// each formula in the dtypes its forward saved, whatever guard is open around backward().
class SuspendGuard {
 public:
  SuspendGuard();
  ~SuspendGuard();
  SuspendGuard(const SuspendGuard&) = delete;
  SuspendGuard& operator=(const SuspendGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace kiln::autocast
