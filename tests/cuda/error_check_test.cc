// The checks around CUDA, cuBLAS, cuDNN and NCCL calls: a failing status throws kiln::Error
// naming the library, the call as written, file:line and the library's own message. These need
// only the libraries, not a GPU, so they run on every machine with the toolkit.
#include <cublas_v2.h>
#include <cudnn.h>
#include <doctest/doctest.h>
#include <nccl.h>

#include <string>

#include "cuda/error.h"

namespace {

template <class F> std::string message_of(F&& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "(no exception)";
}

cudaError_t fails_cuda() { return cudaErrorInvalidValue; }
cublasStatus_t fails_cublas() { return CUBLAS_STATUS_NOT_INITIALIZED; }
cudnnStatus_t fails_cudnn() { return CUDNN_STATUS_BAD_PARAM; }
ncclResult_t fails_nccl() { return ncclInvalidUsage; }

}  // namespace

TEST_CASE("KILN_CUDA_CHECK names the call, the place and CUDA's error") {
  std::string m = message_of([] { KILN_CUDA_CHECK(fails_cuda()); });
  INFO(m);
  CHECK(m.find("CUDA error 1 (cudaErrorInvalidValue") != std::string::npos);
  CHECK(m.find("in fails_cuda()") != std::string::npos);
  CHECK(m.find("error_check_test.cc:") != std::string::npos);
  CHECK_NOTHROW(KILN_CUDA_CHECK(cudaSuccess));
}

TEST_CASE("cuBLAS, cuDNN and NCCL failures throw with the library's message") {
  std::string b = message_of([] { KILN_CUBLAS_CHECK(fails_cublas()); });
  INFO(b);
  CHECK(b.find("cuBLAS error 1") != std::string::npos);
  CHECK(b.find("in fails_cublas()") != std::string::npos);
  CHECK(b.find("error_check_test.cc:") != std::string::npos);
  std::string d = message_of([] { KILN_CUDNN_CHECK(fails_cudnn()); });
  INFO(d);
  CHECK(d.find("cuDNN error") != std::string::npos);
  CHECK(d.find("CUDNN_STATUS_BAD_PARAM") != std::string::npos);
  std::string n = message_of([] { KILN_NCCL_CHECK(fails_nccl()); });
  INFO(n);
  CHECK(n.find("NCCL error 5") != std::string::npos);
  CHECK(n.find("in fails_nccl()") != std::string::npos);
  CHECK_NOTHROW(KILN_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS));
}
