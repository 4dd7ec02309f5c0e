// Checks for every CUDA, cuBLAS, cuDNN and NCCL call: a failure throws kiln::Error naming the
// call, file:line and the library's own error string (never exit or abort). The library
// macros expand where they are used, so only files that call cuBLAS include its header.
#pragma once

#include <cuda_runtime_api.h>

#include "core/error.h"

namespace kiln::cuda::detail {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);

template <class Status, class ToString>
inline void check_status(Status status, Status ok, ToString to_string, const char* lib, const char* call,
                         const char* file, int line) {
  if (status != ok)
    ::kiln::fail("{} error {} ({}) in {} at {}:{}", lib, static_cast<int>(status), to_string(status), call, file, line);
}

}  // namespace kiln::cuda::detail

/// KILN_CUDA_CHECK(cudaMemcpy(...)): throws kiln::Error on anything but cudaSuccess.
#define KILN_CUDA_CHECK(expr)                                                                 \
  do {                                                                                        \
    cudaError_t kiln_err_ = (expr);                                                           \
    if (kiln_err_ != cudaSuccess) ::kiln::cuda::detail::throw_cuda_error(kiln_err_, #expr, __FILE__, __LINE__); \
  } while (0)

/// After a kernel launch: reports a bad launch configuration where it happened.
#define KILN_CUDA_CHECK_LAUNCH() KILN_CUDA_CHECK(cudaGetLastError())

#define KILN_CUBLAS_CHECK(expr)                                                                \
  ::kiln::cuda::detail::check_status((expr), CUBLAS_STATUS_SUCCESS, cublasGetStatusString, "cuBLAS", #expr, \
                                     __FILE__, __LINE__)
#define KILN_CUBLASLT_CHECK(expr) KILN_CUBLAS_CHECK(expr)
#define KILN_CUDNN_CHECK(expr)                                                                 \
  ::kiln::cuda::detail::check_status((expr), CUDNN_STATUS_SUCCESS, cudnnGetErrorString, "cuDNN", #expr, \
                                     __FILE__, __LINE__)
#define KILN_NCCL_CHECK(expr)                                                                  \
  ::kiln::cuda::detail::check_status((expr), ncclSuccess, ncclGetErrorString, "NCCL", #expr, __FILE__, __LINE__)
