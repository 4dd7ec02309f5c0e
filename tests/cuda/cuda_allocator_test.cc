// The caching allocator on a real GPU: tensors reuse freed blocks, statistics follow tensors,
// empty_cache returns memory, the summary reads well, and an impossible request fails with the
// out-of-memory message (the pool logic itself is tested on a fake device in
// caching_allocator_test).
#include <doctest/doctest.h>

#include "core/ops.h"
#include "cuda/allocator.h"
#include "cuda/stream.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

TEST_CASE("a freed CUDA tensor's block is reused by the next tensor of its size") {
  KILN_REQUIRE_GPU();
  cuda::empty_cache();
  const auto before = cuda::memory_stats(0);
  void* first = nullptr;
  {
    Tensor a = empty({1 << 20}, dtype(kFloat32).device("cuda:0"));
    first = a.data_ptr();
    CHECK(cuda::memory_stats(0).allocated == before.allocated + (4 << 20));
  }
  CHECK(cuda::memory_stats(0).allocated == before.allocated);
  Tensor b = empty({1 << 20}, dtype(kFloat32).device("cuda:0"));
  CHECK(b.data_ptr() == first);
  CHECK(cuda::memory_stats(0).num_raw_allocs == before.num_raw_allocs + 1);
}

TEST_CASE("peak, reserved and empty_cache") {
  KILN_REQUIRE_GPU();
  cuda::empty_cache();
  cuda::reset_peak_memory_stats(0);
  const size_t base = cuda::memory_stats(0).allocated;
  {
    Tensor a = empty({64 << 20}, dtype(kFloat32).device("cuda:0"));  // 256 MiB
    Tensor b = empty({16 << 20}, dtype(kFloat32).device("cuda:0"));  // 64 MiB
  }
  auto s = cuda::memory_stats(0);
  CHECK(s.peak_allocated >= base + (320u << 20));
  CHECK(s.reserved >= (320u << 20));
  CHECK(s.cached >= (320u << 20));
  cuda::empty_cache();
  CHECK(cuda::memory_stats(0).reserved < s.reserved);
  std::string summary = cuda::memory_summary(0);
  MESSAGE(summary);
  CHECK(summary.find("memory summary of cuda:0") != std::string::npos);
}

TEST_CASE("an impossible allocation names what was asked, allocated and cached") {
  KILN_REQUIRE_GPU();
  std::string msg;
  try {
    Tensor huge = empty({int64_t{1} << 46}, dtype(kFloat32).device("cuda:0"));  // 256 TiB
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.find("cuda:0: out of memory: tried to allocate 256.00 TiB") != std::string::npos);
  CHECK(msg.find("allocated by tensors") != std::string::npos);
  CHECK(msg.find("reserved by the caching allocator") != std::string::npos);
  CHECK(cuda::memory_stats(0).num_ooms >= 1);
  Tensor ok = ones({10}).to("cuda:0");  // the allocator still works afterwards
  CHECK(ok.to(kCPU).sum().item<float>() == 10);
}

TEST_CASE("a block used on another stream returns to its pool once that stream is done") {
  KILN_REQUIRE_GPU();
  cuda::OwnedStream side(0);
  void* p = nullptr;
  {
    Tensor a = empty({8 << 20}, dtype(kFloat32).device("cuda:0"));
    p = a.data_ptr();
    cuda::record_stream(a, side);
  }  // freed: an event is recorded on `side`, the block waits for it
  CHECK(cuda::memory_stats(0).pending_free == (32u << 20));
  side.stream().synchronize();  // the event has completed
  Tensor b = empty({8 << 20}, dtype(kFloat32).device("cuda:0"));
  CHECK(b.data_ptr() == p);
  CHECK(cuda::memory_stats(0).pending_free == 0);
}
