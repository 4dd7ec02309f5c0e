#include "cuda/error.h"

namespace kiln::cuda::detail {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  // Clear a sticky-free error so the next call does not report it again.
  cudaGetLastError();
  fail("CUDA error {} ({}: {}) in {} at {}:{}", static_cast<int>(err), cudaGetErrorName(err),
       cudaGetErrorString(err), call, file, line);
}

}  // namespace kiln::cuda::detail
