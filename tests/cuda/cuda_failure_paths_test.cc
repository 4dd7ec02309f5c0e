// The CUDA allocator when the device fails under it: a tensor freed after its stream's event can
// no longer be recorded (here: the context reset under it, as after a sticky error) is logged and
// abandoned, not thrown from the tensor's destructor (which would call std::terminate). Runs last
// in its own binary, since the reset invalidates everything created before. Skipped without a GPU.
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include "core/ops.h"
#include "cuda/allocator.h"
#include "cuda/stream.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

TEST_CASE("freeing a tensor whose stream event fails logs and abandons the block instead of throwing") {
  KILN_REQUIRE_GPU();
  const size_t before = cuda::memory_stats(0).abandoned;
  {
    // Never destroyed: after the reset its handle dangles, and cudaStreamDestroy on it may crash
    // (it did on an H200).
    auto* side = new cuda::OwnedStream(0);
    Tensor x = ones({1 << 20}, dtype(kFloat32).device("cuda:0"));
    cuda::record_stream(x, *side);  // freeing x must record an event on `side`
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaDeviceReset() == cudaSuccess);  // `side` is now a dangling handle
    // x's destructor runs here: the event cannot be recorded on `side`.
  }
  CHECK(cuda::memory_stats(0).abandoned >= before + (size_t{4} << 20));
  CHECK(cuda::memory_summary(0).find("abandoned") != std::string::npos);
}
