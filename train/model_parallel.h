// Model parallel in one process: a Sequential's consecutive parts on different devices, the
// activation moved between them with to(device) (autograd carries its gradient back across the
// copy). PlacedSequential is what the Trainer's ModelParallel strategy trains (train/fit.h);
// SplitModel, the main job's CNN cut in two, is its two-part form for hand-written loops.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "nn/sequential.h"

namespace kiln::train {

/// The two devices to split over: cuda:0 + cuda:1 with two GPUs, cpu + cuda:0 with one, and
/// cpu + cpu otherwise. `note` says which case applies and why.
struct DevicePair {
  Device first, second;
  std::string note;
};
DevicePair model_parallel_devices();

/// A Sequential whose parts live on different devices: layers [boundaries[k], boundaries[k+1])
/// on devices[k], each moved there on construction. It holds the same layers under the same
/// names ("0", "1", ...) as the Sequential it is made from, so its state_dict and checkpoints are
/// that model's. forward() moves the input to the first device and each activation across a cut;
/// the output lives on the last device. (to(Device) would gather every part on one device.)
class PlacedSequential : public nn::Sequential {
 public:
  /// Throws naming the values unless devices.size() >= 1 and boundaries are devices.size() + 1
  /// increasing indices from 0 to the layer count.
  PlacedSequential(const nn::Sequential& model, std::vector<int> boundaries, std::vector<Device> devices);
  Tensor forward(const Tensor& x) override;
  const std::vector<int>& boundaries() const { return boundaries_; }
  const std::vector<Device>& devices() const { return devices_; }

 private:
  std::vector<int> boundaries_;
  std::vector<Device> devices_;
};

/// A Sequential cut at layer `at`: layers [0, at) as net1 on `a`, [at, n) as net2 on `b`. The
/// layers are moved, not copied: `model` shares them.
class SplitModel {
 public:
  SplitModel(const nn::Sequential& model, int at, Device a, Device b);
  /// net2(net1(x on a) moved to b); the output lives on b.
  Tensor forward(const Tensor& x);
  std::vector<Tensor> parameters() const;
  nn::Sequential& net1() { return *net1_; }
  nn::Sequential& net2() { return *net2_; }
  Device first() const { return a_; }
  Device second() const { return b_; }

 private:
  std::shared_ptr<nn::Sequential> net1_, net2_;
  Device a_, b_;
};

/// Where the main job's CNN is cut: after its two conv blocks (the convolutions on the first
/// device, the fully connected layers on the second).
constexpr int kCnnSplit = 6;

}  // namespace kiln::train
