// The profiler on a GPU: CUDA kernels carry their time measured with CUDA events, and the table
// shows it in the Device total column. Skips visibly without a CUDA device.
#include <doctest/doctest.h>

#include "core/ops.h"
#include "profiler/key_averages.h"
#include "profiler/profiler.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

TEST_CASE("CUDA kernels are timed on the device") {
  KILN_REQUIRE_GPU();
  REQUIRE(profiler::device_timer(static_cast<int>(DeviceType::CUDA)) != nullptr);
  Tensor a = randn({512, 512}).to(Device("cuda:0")), b = randn({512, 512}).to(Device("cuda:0"));
  profiler::Profiler prof;
  prof.start();
  for (int i = 0; i < 5; ++i) a = matmul(a, b).tanh();
  prof.stop();
  bool timed = false;
  for (const auto& e : prof.events())
    if (e.category == "kernel" && e.device == "cuda:0") {
      CHECK(e.device_ms >= 0);
      timed |= e.device_ms > 0;
    }
  CHECK(timed);
  const profiler::KeyAverage* mm = prof.key_averages().find("bmm");
  if (mm == nullptr) mm = prof.key_averages().find("linear");
  REQUIRE(mm != nullptr);
  CHECK(mm->device_ms > 0);
}
