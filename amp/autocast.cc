#include "amp/autocast.h"

namespace kiln::amp {

AutocastGuard::AutocastGuard(DType dtype, bool enabled) : prev_(autocast::state()) {
  KILN_CHECK(dtype == kFloat16 || dtype == kBFloat16,
             "AutocastGuard: dtype must be f16 or bf16 (the lower precision), got {}", dtype);
  autocast::State s = prev_;
  s.enabled = enabled;
  s.dtype = dtype;
  s.depth = prev_.depth + 1;
  autocast::set_state(s);
}

AutocastGuard::~AutocastGuard() {
  autocast::set_state(prev_);
  // The cached weight casts belong to the outermost guard: they hold f16/bf16 copies of every
  // weight, which should not outlive the step they were made for.
  if (prev_.depth == 0) autocast::clear_cache();
}

}  // namespace kiln::amp
