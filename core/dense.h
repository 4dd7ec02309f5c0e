// Layout helpers for kernels whose contract wants contiguous operands: on any device, through
// that device's copy kernel (no autograd), so CPU and CUDA kernels share one version.
#pragma once

#include "core/tensor.h"

namespace kiln {

/// `t` itself when it is undefined or contiguous, else a contiguous copy.
Tensor dense(const Tensor& t);
/// `t` itself when it is undefined or contiguous with dtype `dt`, else a contiguous copy in `dt`.
Tensor dense_as(const Tensor& t, DType dt);
/// Where a kernel writes `out`: `out` itself when undefined or contiguous, else a fresh contiguous
/// tensor of its shape and dtype, to be copied into `out` by write_back.
Tensor writable(const Tensor& out);
/// writable() for a kernel that computes in dtype `dt`: `out` itself only when it is also in `dt`.
Tensor writable_as(const Tensor& out, DType dt);
/// Copies (converting) `written` into `out` unless it is `out` itself (or `out` is undefined).
void write_back(Tensor& out, const Tensor& written);

}  // namespace kiln
