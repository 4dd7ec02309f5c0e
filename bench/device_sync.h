// The wait for a device's queued work before a benchmark reads the clock.
#pragma once

#include "core/device.h"
#ifdef KILN_HAVE_CUDA  // set by the benchmarks that link //cuda
#include "cuda/device.h"
#endif

namespace kiln::bench {

/// Waits until the work queued on `d` has finished (a no-op on the CPU, and in a build without CUDA).
/// Needed after collectives too: an NCCL Work's wait() only orders the caller's stream.
inline void synchronize(const Device& d) {
#ifdef KILN_HAVE_CUDA
  if (d.is_cuda()) cuda::synchronize();
#endif
  (void)d;
}

}  // namespace kiln::bench
