// Host side of the CUDA argsort (cuda/kernels/sort.cu): rows are contiguous, as the kernel slot's
// contract says (core/ops/sort.cc moves the sorted dim last).
#include "core/kernels.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/kernels/launch.h"
#include "cuda/launch_util.h"

namespace kiln::cuda {
namespace {

void argsort_kernel(Tensor& indices, const Tensor& x, bool descending) {
  const int64_t n = x.dim() == 0 ? 1 : x.size(-1);
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  DeviceGuard g(x.device());
  kern::launch_argsort(scalar_type(x.dtype()), x.data_ptr(), indices.data_ptr<int64_t>(), rows, n, descending,
                       stream_of(x));
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace
}  // namespace kiln::cuda

KILN_REGISTER_KERNEL(argsort, ::kiln::DeviceType::CUDA, &::kiln::cuda::argsort_kernel);
