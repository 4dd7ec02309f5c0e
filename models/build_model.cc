// The main job's models by name (see build_model.h).
#include "models/build_model.h"

#include "core/error.h"
#include "models/mlp_cnn.h"
#include "models/resnet.h"

namespace kiln::models {

bool is_sequential_model(const std::string& name) { return name == "mlp" || name == "cnn"; }

nn::ModulePtr<> build_model(const std::string& name, const ModelOptions& options) {
  if (is_sequential_model(name)) return make_model(name, options.dropout);
  KILN_CHECK(name == "resnet18", "build_model: unknown model '{}' (mlp, cnn or resnet18)", name);
  return resnet18({.num_classes = 10, .in_channels = 1, .width = options.width, .small_input = true});
}

int64_t input_size(const std::string& name) {
  KILN_CHECK(is_sequential_model(name) || name == "resnet18", "input_size: unknown model '{}' (mlp, cnn or resnet18)",
             name);
  return name == "resnet18" ? 32 : 28;
}

}  // namespace kiln::models
