// Host side of the fused CUDA cross-entropy (cuda/kernels/cross_entropy.cu): contiguous operands
// (copied when they are not), launches on the current stream. A target outside [0, C) that is
// not ignore_index cannot be checked on the host without a synchronizing copy of the target each
// step, so the kernel makes that row's loss (and gradient) NaN and records the first bad target
// in mapped host memory; the next cross_entropy call on any CUDA device (forward or backward)
// finds it there, without synchronizing, and throws naming it. Reporting is therefore one call
// late, once the kernel that saw the target has finished.
#include <cuda_runtime_api.h>

#include <mutex>

#include "core/dense.h"
#include "core/kernels.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/kernels/cross_entropy.h"
#include "cuda/launch_util.h"
#include "cuda/stream.h"

namespace kiln::cuda {
namespace {

/// The process's error record: pinned, mapped and portable, so every device's kernels write the
/// same host memory (unified addressing: the host pointer is the device pointer).
kern::CrossEntropyError* error_record() {
  static kern::CrossEntropyError* record = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    KILN_CUDA_CHECK(cudaHostAlloc(&p, sizeof(kern::CrossEntropyError), cudaHostAllocMapped | cudaHostAllocPortable));
    record = static_cast<kern::CrossEntropyError*>(p);
    *record = {};
  });
  return record;
}

/// Throws if a kernel has reported an out-of-range target since the last check (see the top).
void check_reported_target(kern::CrossEntropyError* err) {
  volatile int* state = &err->state;
  if (*state != 2) return;
  const int64_t t = err->target, row = err->row, classes = err->classes;
  *state = 0;
  fail("cross_entropy: target {} (row {}) is out of range for {} classes (valid: 0..{}, or ignore_index); found on "
       "CUDA by an earlier call, whose loss for that row is NaN",
       t, row, classes, classes - 1);
}

// Shapes and dtypes are the slots' contract: core/ops/cross_entropy.cc checks the forward's
// operands, and the backward gets the forward's logits, lse and target with a gradient of the
// loss's shape (autograd/functions/cross_entropy.cc).
void cross_entropy_kernel(Tensor& loss, Tensor& lse, const Tensor& logits, const Tensor& target,
                          int64_t ignore_index, double label_smoothing) {
  const int64_t N = logits.size(0), C = logits.size(1);
  DeviceGuard g(logits.device());
  kern::CrossEntropyError* err = error_record();
  check_reported_target(err);
  if (N == 0) return;
  const Tensor x = dense(logits), t = dense(target);
  Tensor lo = writable(loss), ls = writable(lse);
  kern::launch_cross_entropy(scalar_type(x.dtype()), x.data_ptr(), t.data_ptr<int64_t>(), lo.data_ptr(),
                             ls.data_ptr(), N, C, ignore_index, label_smoothing, err, stream_of(x));
  KILN_CUDA_CHECK_LAUNCH();
  write_back(loss, lo);
  write_back(lse, ls);
}

void cross_entropy_backward_kernel(Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                                   const Tensor& lse, const Tensor& target, int64_t ignore_index,
                                   double label_smoothing) {
  const int64_t N = logits.size(0), C = logits.size(1);
  DeviceGuard g(logits.device());
  check_reported_target(error_record());
  if (N == 0 || C == 0) return;
  const Tensor x = dense(logits), gl = dense(grad_loss), l = dense(lse), t = dense(target);
  Tensor gx = writable(grad_logits);
  kern::launch_cross_entropy_backward(scalar_type(x.dtype()), gx.data_ptr(), gl.data_ptr(), x.data_ptr(),
                                      l.data_ptr(), t.data_ptr<int64_t>(), N, C, ignore_index, label_smoothing,
                                      stream_of(x));
  KILN_CUDA_CHECK_LAUNCH();
  write_back(grad_logits, gx);
}

}  // namespace

KILN_REGISTER_KERNEL(cross_entropy, DeviceType::CUDA, &cross_entropy_kernel);
KILN_REGISTER_KERNEL(cross_entropy_backward, DeviceType::CUDA, &cross_entropy_backward_kernel);

}  // namespace kiln::cuda
