#include "core/device.h"

#include <charconv>

#include <fmt/format.h>

namespace kiln {

std::string_view device_type_name(DeviceType t) { return t == DeviceType::CPU ? "cpu" : "cuda"; }

Device::Device(std::string_view spec) {
  std::string_view kind = spec.substr(0, spec.find(':'));
  if (kind == "cpu") type = DeviceType::CPU;
  else if (kind == "cuda") type = DeviceType::CUDA;
  else fail("Device: unknown device '{}' (expected cpu, cuda or cuda:N)", spec);
  if (kind.size() < spec.size()) {
    std::string_view num = spec.substr(kind.size() + 1);
    auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
    KILN_CHECK(ec == std::errc() && p == num.data() + num.size() && index >= 0,
               "Device: bad device index in '{}'", spec);
  }
}

namespace {
int (*g_device_counts[kNumDeviceTypes])() = {};
void (*g_synchronize[kNumDeviceTypes])(int) = {};
}

int device_count(DeviceType t) {
  if (t == DeviceType::CPU) return 1;
  auto f = g_device_counts[static_cast<int>(t)];
  return f ? f() : 0;
}

void register_device_count(DeviceType t, int (*count)()) { g_device_counts[static_cast<int>(t)] = count; }

void synchronize(const Device& d) {
  if (auto f = g_synchronize[static_cast<int>(d.type)]) f(d.index);
}

void register_synchronize(DeviceType t, void (*sync)(int index)) { g_synchronize[static_cast<int>(t)] = sync; }

Device best_device() { return device_count(DeviceType::CUDA) > 0 ? Device(DeviceType::CUDA, 0) : kCPU; }

std::string Device::str() const {
  if (type == DeviceType::CPU) return "cpu";
  return fmt::format("cuda:{}", index);
}

}  // namespace kiln

fmt::format_context::iterator fmt::formatter<kiln::Device>::format(const kiln::Device& d, format_context& ctx) const {
  return formatter<std::string>::format(d.str(), ctx);
}
