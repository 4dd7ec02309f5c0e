// ResNet-18 (see resnet.h): torchvision.models.resnet's BasicBlock and ResNet, with two blocks per
// stage.
#include "models/resnet.h"

#include <string>

namespace kiln::models {

void ResNetOptions::check() const {
  KILN_CHECK(num_classes > 0, "ResNet: num_classes must be positive, got {}", num_classes);
  KILN_CHECK(in_channels > 0, "ResNet: in_channels must be positive, got {}", in_channels);
  KILN_CHECK(width > 0, "ResNet: width must be positive, got {}", width);
}

namespace {

/// A convolution without bias, initialised as torchvision's ResNet does: He-normal with fan_out
/// (BatchNorm already starts at weight 1 and bias 0, and fc keeps nn.Linear's default).
nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding) {
  nn::Conv2d c(in, out, kernel, {.stride = stride, .padding = padding, .bias = false});
  nn::init::kaiming_normal_(c.weight, 0.0, nn::init::FanMode::fan_out, "relu");
  return c;
}

nn::Conv2d conv3x3(int64_t in, int64_t out, int64_t stride) { return conv(in, out, 3, stride, 1); }

/// One stage: two BasicBlocks, the first with `stride` (and a downsample when shapes change).
nn::Sequential make_layer(int64_t in_planes, int64_t planes, int64_t stride) {
  nn::Sequential layer;
  layer.push_back(BasicBlock(in_planes, planes, stride));
  layer.push_back(BasicBlock(planes, planes, 1));
  return layer;
}

}  // namespace

BasicBlock::BasicBlock(int64_t in_planes, int64_t planes, int64_t stride) : nn::Module("BasicBlock") {
  conv1 = register_module("conv1", conv3x3(in_planes, planes, stride));
  bn1 = register_module("bn1", nn::BatchNorm2d(planes));
  conv2 = register_module("conv2", conv3x3(planes, planes, 1));
  bn2 = register_module("bn2", nn::BatchNorm2d(planes));
  if (stride != 1 || in_planes != planes)
    downsample = register_module(
        "downsample", nn::Sequential{conv(in_planes, planes, 1, stride, 0),
                                     nn::BatchNorm2d(planes)});
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor out = relu(bn1(conv1(x)));
  out = bn2(conv2(out));
  return relu(out + (downsample ? downsample(x) : x));
}

ResNet::ResNet(const ResNetOptions& o) : nn::Module("ResNet"), options(o) {
  o.check();
  const int64_t w = o.width;
  conv1 = register_module("conv1", o.small_input ? conv3x3(o.in_channels, w, 1)
                                                 : conv(o.in_channels, w, 7, 2, 3));
  bn1 = register_module("bn1", nn::BatchNorm2d(w));
  layer1 = register_module("layer1", make_layer(w, w, 1));
  layer2 = register_module("layer2", make_layer(w, 2 * w, 2));
  layer3 = register_module("layer3", make_layer(2 * w, 4 * w, 2));
  layer4 = register_module("layer4", make_layer(4 * w, 8 * w, 2));
  fc = register_module("fc", nn::Linear(8 * w, o.num_classes));
}

Tensor ResNet::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4 && x.size(1) == options.in_channels,
             "ResNet: expected input [N, {}, H, W], got shape {}", options.in_channels, x.sizes());
  Tensor h = relu(bn1(conv1(x)));
  if (!options.small_input) h = max_pool2d(h, {3}, {2}, {1});
  h = layer4(layer3(layer2(layer1(h))));
  return fc(h.mean({2, 3}));  // torchvision's AdaptiveAvgPool2d((1, 1)) and flatten
}

}  // namespace kiln::models
