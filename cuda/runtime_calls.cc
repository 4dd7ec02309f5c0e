// See runtime_calls.h.
#include "cuda/runtime_calls.h"

#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>

#include "cuda/error.h"
#include "cuda/stream.h"

namespace kiln::cuda {

void copy_device_bytes(void* dst, const void* src, size_t bytes) {
  KILN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                  static_cast<cudaStream_t>(current_stream().raw())));
}

void profiler_start() { KILN_CUDA_CHECK(cudaProfilerStart()); }

void profiler_stop() { KILN_CUDA_CHECK(cudaProfilerStop()); }

}  // namespace kiln::cuda
