// Copies between the host and CUDA devices and between devices, on the current stream.
// Host -> device returns as soon as the source has been read (at once when it is pinned: see
// pin_memory in cuda/allocator.h, whose block is then held until the copy is done); device ->
// host waits for the copy, since the caller reads the result next; device -> device between two
// GPUs runs on the destination's stream after the source's queued work, and the source's stream
// then waits for the copy (events, not the host), so the source block is not reused mid-copy.
#pragma once

#include "core/tensor.h"

namespace kiln::cuda {

/// out = src for same-shape, same-dtype tensors on different devices (one of them CUDA), src
/// contiguous (core's copy_across_devices kernel: what tensor.to(device) runs).
void copy_across_devices(Tensor& out, const Tensor& src);

}  // namespace kiln::cuda
