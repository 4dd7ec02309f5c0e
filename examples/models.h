// The Fashion-MNIST models of the main job and its PyTorch comparison (bench/pytorch_mnist.py
// builds the same layers with the same shapes and init).
#pragma once

#include <memory>
#include <string>

#include "nn/nn.h"

namespace kiln::examples {

/// MLP 784-256-256-10 with ReLU.
inline std::shared_ptr<nn::Sequential> make_mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, 256), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(256, 256), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(256, 10)});
}

/// CNN: conv3x3(1->32) relu maxpool2, conv3x3(32->64) relu maxpool2, fc 3136->128 relu, fc 128->10.
inline std::shared_ptr<nn::Sequential> make_cnn() {
  nn::Conv2dOptions same{.padding = {1, 1}};
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 32, IntList{3, 3}, same), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::MaxPool2d>(IntList{2, 2}), std::make_shared<nn::Conv2d>(32, 64, IntList{3, 3}, same),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(IntList{2, 2}), std::make_shared<nn::Flatten>(),
      std::make_shared<nn::Linear>(64 * 7 * 7, 128), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(128, 10)});
}

/// The benchmarks' matmul-bound MLP, 784-width-width-width-10 with ReLU (amp_bench: 4096,
/// ddp_bench: 2048).
inline std::shared_ptr<nn::Sequential> make_wide_mlp(int64_t width) {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(784, width), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(width, width), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(width, width), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(width, 10)});
}

inline std::shared_ptr<nn::Sequential> make_model(const std::string& name) {
  return name == "cnn" ? make_cnn() : make_mlp();
}

}  // namespace kiln::examples
