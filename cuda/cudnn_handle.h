// What every cuDNN-backed kernel (conv.cc, batch_norm.cc) shares: the handle, one per thread and
// device, created on first use and bound to the thread's current stream at each call; and the
// blend factors cuDNN takes by pointer.
#pragma once

#include <cudnn.h>

#include "core/tensor.h"

namespace kiln::cuda {

/// The calling thread's handle for `t`'s device, set to that device's current stream. Call it
/// with `t`'s device current (a DeviceGuard): cuDNN creates the handle there.
cudnnHandle_t cudnn_handle_for(const Tensor& t);

/// A blend factor (alpha, beta) as cuDNN wants it: double for f64 data, float otherwise.
struct CudnnScale {
  double d;
  float f;
  explicit CudnnScale(double v) : d(v), f(static_cast<float>(v)) {}
  const void* for_type(DType t) const { return t == kFloat64 ? static_cast<const void*>(&d) : &f; }
};
inline const CudnnScale kCudnnOne(1), kCudnnZero(0);

}  // namespace kiln::cuda
