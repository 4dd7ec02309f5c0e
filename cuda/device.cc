// Device management, and the device count core's device_count(DeviceType::CUDA) reports.
#include "cuda/device.h"

#include <cuda_runtime_api.h>

#include <mutex>

#include "core/allocator.h"
#include "cuda/error.h"

namespace kiln::cuda {

int device_count() {
  static int count = [] {
    int n = 0;
    // No driver ("driver version is insufficient"), no GPU, a broken install: all mean 0.
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

int current_device() {
  int d = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int index) {
  const int n = device_count();
  KILN_CHECK(index >= 0 && index < n, "cuda: device cuda:{} does not exist ({} CUDA device{} present)", index, n,
             n == 1 ? "" : "s");
  KILN_CUDA_CHECK(cudaSetDevice(index));
}

void synchronize() { KILN_CUDA_CHECK(cudaDeviceSynchronize()); }

std::string device_description(int index) {
  cudaDeviceProp p{};
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  return fmt::format("{}, {:.1f} GiB, sm_{}{}", p.name, static_cast<double>(p.totalGlobalMem) / (1 << 30), p.major,
                     p.minor);
}

DeviceGuard::DeviceGuard(int index) {
  if (index < 0) return;
  const int cur = current_device();
  if (cur == index) return;
  set_device(index);
  previous_ = cur;
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);  // a destructor must not throw
}

namespace {
const bool registered = [] {
  register_device_count(DeviceType::CUDA, &device_count);
  register_synchronize(DeviceType::CUDA, [](int index) {
    DeviceGuard g(index);
    synchronize();
  });
  return true;
}();
}  // namespace

}  // namespace kiln::cuda
