// Capture and replay of a device's work (CUDA graphs) behind a seam, so code above cuda/ (the
// trainer, benchmarks) can record a whole training step once and replay it without CUDA headers:
// cuda/graph.cc registers the CUDA implementation. A replay re-runs the recorded kernels on the
// same memory: inputs must be written in place into the tensors the capture read.
#pragma once

#include <functional>
#include <memory>

#include "core/device.h"

namespace kiln {

/// One captured piece of device work, replayable many times.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  /// Runs `work` once in capture mode: its device work is recorded, not executed, and its
  /// allocations come from a pool private to this graph. Once per graph.
  virtual void capture(const std::function<void()>& work) = 0;
  /// Queues the recorded work on the device's current stream.
  virtual void replay() = 0;
};

using DeviceGraphFactory = std::unique_ptr<DeviceGraph> (*)(Device device);

/// A new, empty graph for `device`; throws naming the device when its backend cannot capture
/// (the CPU, or CUDA in a build without the CUDA backend).
std::unique_ptr<DeviceGraph> make_device_graph(Device device);
bool has_device_graph(DeviceType type);
void register_device_graph(DeviceType type, DeviceGraphFactory factory);

}  // namespace kiln
