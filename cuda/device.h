// CUDA devices: how many there are (0 without a GPU or driver, never an error), which one the
// calling thread uses, and a guard that switches to a device for a scope. Includes no CUDA
// header, so code above cuda/ may use it.
#pragma once

#include "core/device.h"

namespace kiln::cuda {

/// Usable CUDA devices; 0 when the driver or GPU is missing (any CUDA failure counts as none).
int device_count();
/// True when at least one device is usable.
inline bool is_available() { return device_count() > 0; }
/// The calling thread's current device index.
int current_device();
/// Makes `index` the calling thread's current device; throws naming it if out of range.
void set_device(int index);
/// Waits for all work on the current device.
void synchronize();
/// Name and memory of a device ("NVIDIA H100 80GB HBM3, 79.1 GiB, sm_90").
std::string device_description(int index);

/// Switches the current device for a scope and restores the previous one (no-op for the CPU
/// or when the device is already current).
class DeviceGuard {
 public:
  explicit DeviceGuard(int index);
  explicit DeviceGuard(Device device) : DeviceGuard(device.is_cuda() ? device.index : -1) {}
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace kiln::cuda
