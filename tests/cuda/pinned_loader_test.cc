// Pinned host memory: kiln::pin_memory and the DataLoader's pin_memory option give the same
// values as unpinned batches everywhere; with a GPU the batches are page-locked and their copies
// to the device are correct after asynchronous transfers.
#include <doctest/doctest.h>

#include "core/ops.h"
#include "cuda/allocator.h"
#include "cuda/device.h"
#include "data/data.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

TEST_CASE("DataLoader pin_memory yields the same batches (pinned when a GPU is usable)") {
  manual_seed(3);
  auto ds = std::make_shared<data::TensorDataset>(randn({100, 6}), randint(0, 10, {100}));
  data::DataLoader plain(ds, {.batch_size = 16, .num_workers = 2});
  data::DataLoader pinned(ds, {.batch_size = 16, .num_workers = 2, .pin_memory = true});
  std::vector<Tensor> a, b;
  for (auto& batch : plain) a.push_back(batch.data);
  int n = 0;
  for (auto& batch : pinned) {
    CHECK(test::allclose(batch.data, a[n], 0, 0));
    CHECK(batch.data.is_contiguous());
    CHECK(cuda::is_pinned(batch.data) == (cuda::device_count() > 0));
    CHECK(cuda::is_pinned(batch.target) == (cuda::device_count() > 0));
    if (cuda::device_count() > 0) CHECK(test::allclose(batch.data.to("cuda:0").to(kCPU), a[n], 0, 0));
    ++n;
  }
  CHECK(n == static_cast<int>(a.size()));
}

TEST_CASE("pin_memory of a strided tensor is a contiguous copy") {
  Tensor x = randn({8, 5}).transpose(0, 1);
  Tensor p = pin_memory(x);
  CHECK(p.is_contiguous());
  CHECK(test::allclose(p, x, 0, 0));
  CHECK(cuda::is_pinned(p) == (cuda::device_count() > 0));
}
