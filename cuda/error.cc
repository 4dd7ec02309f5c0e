#include "cuda/error.h"

namespace kiln::cuda::detail {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  // Clear a sticky-free error so the next call does not report it again.
  cudaGetLastError();
  const bool capture = err == cudaErrorStreamCaptureUnsupported || err == cudaErrorStreamCaptureInvalidated ||
                       err == cudaErrorStreamCaptureImplicit || err == cudaErrorCapturedEvent ||
                       err == cudaErrorStreamCaptureWrongThread || err == cudaErrorStreamCaptureUnmatched ||
                       err == cudaErrorStreamCaptureUnjoined || err == cudaErrorStreamCaptureIsolation ||
                       err == cudaErrorStreamCaptureMerge;
  fail("CUDA error {} ({}: {}) in {} at {}:{}{}", static_cast<int>(err), cudaGetErrorName(err),
       cudaGetErrorString(err), call, file, line,
       capture ? " (during a CUDA graph capture: host synchronisation, copies to or from the host and cudaMalloc "
                 "outside the caching allocator are not allowed there; see cuda/graph.h)"
               : "");
}

}  // namespace kiln::cuda::detail
