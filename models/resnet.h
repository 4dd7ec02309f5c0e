// ResNet-18 (He et al. 2015) in torchvision's layout: conv1, bn1, layer1..layer4 of two
// BasicBlocks each (conv1/bn1/conv2/bn2, and downsample.0/.1 where the shape changes), fc. The
// parameter and buffer names are torchvision's, so `torchvision.models.resnet18().state_dict()`
// saved as safetensors loads by name (num_batches_tracked included).
#pragma once

#include <cstdint>
#include <memory>

#include "nn/nn.h"

namespace kiln::models {

struct ResNetOptions {
  int64_t num_classes = 1000;
  int64_t in_channels = 3;
  /// Channels of layer1; layer2..4 double it (torchvision: 64). 16 trains ResNet-18 on 2 cores.
  int64_t width = 64;
  /// For 32x32 inputs (CIFAR ResNets): conv1 is 3x3 with stride 1 and there is no max-pool, where
  /// ImageNet's stem (7x7 stride 2, then a 3x3 stride-2 max-pool) would leave 8x8 maps to layer1.
  /// The names stay torchvision's; only conv1's kernel shape changes.
  bool small_input = false;
  /// Throws naming the field when a value is not positive.
  void check() const;
};

/// Two 3x3 convolutions with BatchNorm and a shortcut: relu(bn2(conv2(relu(bn1(conv1(x))))) + s(x)),
/// where s is the identity, or downsample (1x1 conv with `stride`, then BatchNorm) when the
/// stride or the channel count changes.
class BasicBlock : public nn::Module {
 public:
  BasicBlock(int64_t in_planes, int64_t planes, int64_t stride);
  Tensor forward(const Tensor& x) override;

  nn::ModulePtr<nn::Conv2d> conv1, conv2;
  nn::ModulePtr<nn::BatchNorm2d> bn1, bn2;
  nn::ModulePtr<nn::Sequential> downsample;  // null for an identity shortcut
};

/// ResNet-18: [N, in_channels, H, W] -> logits [N, num_classes]. Initialised as torchvision:
/// convolutions kaiming_normal (fan_out, relu), BatchNorm weight 1 and bias 0, fc as nn.Linear.
class ResNet : public nn::Module {
 public:
  explicit ResNet(const ResNetOptions& options = {});
  Tensor forward(const Tensor& x) override;

  const ResNetOptions options;
  nn::ModulePtr<nn::Conv2d> conv1;
  nn::ModulePtr<nn::BatchNorm2d> bn1;
  nn::ModulePtr<nn::Sequential> layer1, layer2, layer3, layer4;
  nn::ModulePtr<nn::Linear> fc;
};

/// ResNet-18 as a shared module (what trainers and DDP hold).
inline std::shared_ptr<ResNet> resnet18(const ResNetOptions& options = {}) { return std::make_shared<ResNet>(options); }

}  // namespace kiln::models
