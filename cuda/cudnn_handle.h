// The cuDNN handle every cuDNN-backed kernel (conv.cc, batch_norm.cc) runs on: one per thread
// and device, created on first use and bound to the thread's current stream at each call.
#pragma once

#include <cudnn.h>

#include "core/tensor.h"

namespace kiln::cuda {

/// The calling thread's handle for `t`'s device, set to that device's current stream. Call it
/// with `t`'s device current (a DeviceGuard): cuDNN creates the handle there.
cudnnHandle_t cudnn_handle_for(const Tensor& t);

}  // namespace kiln::cuda
