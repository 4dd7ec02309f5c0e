// The Fashion-MNIST models of the main job and its PyTorch comparison (bench/pytorch_mnist.py
// builds the same layers with the same shapes and init).
#pragma once

#include <memory>
#include <string>

#include "nn/nn.h"

namespace kiln::models {

// Each model is built in braces (layers constructed left to right, so a seed gives the same
// initial weights as before), then moved into the ModulePtr the trainer and DDP hold (no make_shared).

/// MLP 784-256-256-10 with ReLU; with `dropout` > 0, Dropout(dropout) after each ReLU.
inline nn::ModulePtr<nn::Sequential> make_mlp(double dropout = 0) {
  if (dropout > 0)
    return nn::Sequential{nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Dropout(dropout), nn::Linear(256, 256),
                          nn::ReLU(), nn::Dropout(dropout), nn::Linear(256, 10)};
  return nn::Sequential{nn::Flatten(), nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 256), nn::ReLU(),
                        nn::Linear(256, 10)};
}

/// CNN: conv3x3(1->32) relu maxpool2, conv3x3(32->64) relu maxpool2, fc 3136->128 relu, fc 128->10.
inline nn::ModulePtr<nn::Sequential> make_cnn() {
  return nn::Sequential{
      nn::Conv2d(1, 32, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
      nn::Conv2d(32, 64, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
      nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Linear(128, 10)};
}

/// The benchmarks' matmul-bound MLP, 784-width-width-width-10 with ReLU (amp_bench: 4096,
/// ddp_bench: 2048).
inline nn::ModulePtr<nn::Sequential> make_wide_mlp(int64_t width) {
  return nn::Sequential{nn::Flatten(), nn::Linear(784, width), nn::ReLU(), nn::Linear(width, width), nn::ReLU(),
                        nn::Linear(width, width), nn::ReLU(), nn::Linear(width, 10)};
}

inline nn::ModulePtr<nn::Sequential> make_model(const std::string& name, double dropout = 0) {
  return name == "cnn" ? make_cnn() : make_mlp(dropout);
}

}  // namespace kiln::models
