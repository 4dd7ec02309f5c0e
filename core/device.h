// Where a tensor lives: Device{type, index}, written "cpu" or "cuda:N".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"

namespace kiln {

enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  Device() = default;
  Device(DeviceType t, int i = 0) : type(t), index(i) {}  // NOLINT: Device(kCUDA) reads well
  /// Parses "cpu", "cuda", "cuda:1"; throws naming the string otherwise.
  Device(std::string_view spec);  // NOLINT
  Device(const char* spec) : Device(std::string_view(spec)) {}  // NOLINT

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string str() const;
};

inline const Device kCPU{DeviceType::CPU, 0};

std::string_view device_type_name(DeviceType t);

/// Devices of a type this process can use: 1 for the CPU; for CUDA, what the CUDA backend
/// reports (0 when it is not linked, or when there is no GPU or driver).
int device_count(DeviceType t);
/// Lets a backend report its device count (the CUDA backend registers cudaGetDeviceCount's).
void register_device_count(DeviceType t, int (*count)());
/// The best device present: cuda:0 when a GPU is usable, else the CPU.
Device best_device();

/// Waits until the work queued on device `d` has finished: a no-op on the CPU, whose kernels
/// return when done, and for a type no backend registered a wait for (a build without CUDA).
void synchronize(const Device& d);
/// Lets a backend register its wait (the CUDA backend's cudaDeviceSynchronize on that device).
void register_synchronize(DeviceType t, void (*sync)(int index));

}  // namespace kiln

/// A device ("cuda:1") in messages, with string format specs. The body is in device.cc (see the
/// DType formatter in dtype.h).
template <> struct fmt::formatter<kiln::Device> : fmt::formatter<std::string> {
  format_context::iterator format(const kiln::Device& d, format_context& ctx) const;
};
