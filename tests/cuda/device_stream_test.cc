// Devices, guards, streams and events on a real GPU: device count and errors, the per-thread
// current stream, event ordering across streams (and across devices in a peer copy) and timing.
// Without a GPU: the count is 0, core reports no CUDA device and CPU work is unaffected; the rest
// is skipped.
#include <doctest/doctest.h>

#include <thread>

#include "core/kernels.h"
#include "core/ops.h"
#include "cuda/allocator.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/stream.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

TEST_CASE("core sees the CUDA backend's device count, 0 without a GPU") {
  CHECK(device_count(DeviceType::CUDA) == cuda::device_count());
  if (cuda::device_count() == 0) {
    CHECK(best_device() == kCPU);
    Tensor x = ones({3}) + 1;  // the CPU keeps working
    CHECK(x.to_vector<float>() == std::vector<float>{2, 2, 2});
  }
}

TEST_CASE("a failed CUDA call throws naming the call, the file and the error") {
  KILN_REQUIRE_GPU();
  std::string msg;
  try {
    KILN_CUDA_CHECK(cudaSetDevice(1 << 20));
  } catch (const Error& e) {
    msg = e.what();
  }
  CHECK(msg.find("cudaSetDevice(1 << 20)") != std::string::npos);
  CHECK(msg.find("device_stream_test.cc:") != std::string::npos);
  CHECK(msg.find("cudaErrorInvalidDevice") != std::string::npos);
  CHECK_THROWS_WITH_AS(cuda::set_device(cuda::device_count()), doctest::Contains("does not exist"), Error);
}

TEST_CASE("DeviceGuard switches and restores the current device") {
  KILN_REQUIRE_GPU();
  const int n = cuda::device_count();
  cuda::set_device(0);
  {
    cuda::DeviceGuard g(n - 1);
    CHECK(cuda::current_device() == n - 1);
  }
  CHECK(cuda::current_device() == 0);
  MESSAGE(cuda::device_description(0));
}

TEST_CASE("the current stream is per thread, and StreamGuard restores it") {
  KILN_REQUIRE_GPU();
  cuda::OwnedStream s(0);
  CHECK(cuda::current_stream(0).raw() == nullptr);
  {
    cuda::StreamGuard g(s);
    CHECK(cuda::current_stream(0) == s.stream());
    cuda::RawStream other = reinterpret_cast<cuda::RawStream>(1);
    std::thread([&] { other = cuda::current_stream(0).raw(); }).join();
    CHECK(other == nullptr);  // another thread still has the default stream
  }
  CHECK(cuda::current_stream(0).raw() == nullptr);
}

TEST_CASE("an event orders work across streams") {
  KILN_REQUIRE_GPU();
  cuda::OwnedStream producer(0), consumer(0);
  const int64_t n = 1 << 24;
  Tensor x = empty({n}, dtype(kFloat32).device("cuda:0"));
  Tensor y;
  {
    cuda::StreamGuard g(producer);
    x.fill_(1.0);
    for (int i = 0; i < 20; ++i) x.add_(ones({1}).to("cuda:0"));  // keep the producer busy
  }
  cuda::Event done;
  done.record(producer);
  consumer.stream().wait(done);
  {
    cuda::StreamGuard g(consumer);
    y = x * 2;
    cuda::record_stream(x, consumer);
  }
  consumer.stream().synchronize();
  CHECK(done.query());
  auto v = y.to_vector<float>();
  CHECK(v.front() == 42);
  CHECK(v.back() == 42);
}

TEST_CASE("a peer copy keeps its source block from reuse until the copy is done") {
  KILN_REQUIRE_GPU();
  if (cuda::device_count() < 2) {
    std::printf("skipped: fewer than 2 CUDA devices (peer copy)\n");
    MESSAGE("skipped: fewer than 2 CUDA devices");
    return;
  }
  // Free the source at once and overwrite a block of its size on its device: the source
  // device's stream must wait for the copy, or the overwrite races the copy's reads.
  const int64_t n = int64_t{1} << 26;
  Tensor host = rand({n}, kFloat32);
  Tensor want = host.narrow(0, n - (1 << 10), 1 << 10);
  Tensor dst;
  {
    Tensor src = host.to("cuda:0");
    dst = src.to("cuda:1");
  }
  Tensor reuse = empty({n}, dtype(kFloat32).device("cuda:0"));
  reuse.fill_(-7.0);
  Tensor got = dst.narrow(0, n - (1 << 10), 1 << 10).to(kCPU);
  CHECK(got.to_vector<float>() == want.to_vector<float>());
  CHECK(reuse.narrow(0, 0, 1).to(kCPU).item<float>() == -7.0f);
}

TEST_CASE("timing events measure elapsed time") {
  KILN_REQUIRE_GPU();
  cuda::Event start(true), end(true);
  Tensor x = empty({1 << 24}, dtype(kFloat32).device("cuda:0"));
  start.record(cuda::current_stream(0));
  x.fill_(3);
  end.record(cuda::current_stream(0));
  end.synchronize();
  CHECK(end.query());
  CHECK(start.elapsed_ms(end) >= 0);
  cuda::Event untimed;
  untimed.record(cuda::current_stream(0));
  CHECK_THROWS_WITH_AS(start.elapsed_ms(untimed), doctest::Contains("enable_timing"), Error);
}
