// The main job's models by name (--model): "mlp" and "cnn" (models/mlp_cnn.h, Sequentials) and
// "resnet18" (models/resnet.h) for Fashion-MNIST's 1-channel images in 10 classes.
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"

namespace kiln::models {

struct ModelOptions {
  double dropout = 0;  // mlp: after each hidden ReLU
  int64_t width = 16;  // resnet18: channels of layer1 (torchvision: 64)
};

/// The names build_model accepts.
inline constexpr const char* kModelNames[] = {"mlp", "cnn", "resnet18"};

/// True for the models that are an nn::Sequential (what the pipeline splits into stages).
bool is_sequential_model(const std::string& name);

/// The model `name` for [N, 1, H, W] inputs and 10 classes (resnet18: H = W = 32, the
/// small-input stem); throws naming an unknown name.
nn::ModulePtr<> build_model(const std::string& name, const ModelOptions& options = {});

/// The image side the model expects (28 for mlp and cnn, 32 for resnet18).
int64_t input_size(const std::string& name);

}  // namespace kiln::models
