// The registry behind make_device_graph: one factory per device type, filled by backends'
// static initialisers.
#include "core/device_graph.h"

#include <array>

#include "core/error.h"

namespace kiln {
namespace {

std::array<DeviceGraphFactory, kNumDeviceTypes>& factories() {
  static std::array<DeviceGraphFactory, kNumDeviceTypes> f{};
  return f;
}

size_t slot(DeviceType type) { return static_cast<size_t>(type); }

}  // namespace

void register_device_graph(DeviceType type, DeviceGraphFactory factory) { factories()[slot(type)] = factory; }

bool has_device_graph(DeviceType type) { return factories()[slot(type)] != nullptr; }

std::unique_ptr<DeviceGraph> make_device_graph(Device device) {
  DeviceGraphFactory f = factories()[slot(device.type)];
  KILN_CHECK(f != nullptr,
             "graph capture: {} has no graph backend (CUDA graphs need a CUDA device and a build with the CUDA "
             "toolkit)",
             device);
  return f(device);
}

}  // namespace kiln
