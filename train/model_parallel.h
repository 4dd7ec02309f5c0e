// Model parallel in one process: the main job's CNN cut in two, `net1` on one device and `net2`
// on another, the activation moved between them with to(device) (autograd carries its gradient
// back across the copy). Used by examples/model_parallel.cc and its test.
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
