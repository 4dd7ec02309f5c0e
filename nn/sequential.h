// Sequential: runs its children in order, named "0", "1", ... as in PyTorch.
#pragma once

#include <initializer_list>

#include "nn/module.h"

namespace kiln::nn {

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> layers) : Module("Sequential") {
    for (const auto& l : layers) push_back(l);
  }
  void push_back(std::shared_ptr<Module> layer) {
    layers_.push_back(register_module(std::to_string(layers_.size()), std::move(layer)));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (auto& l : layers_) h = l->forward(h);
    return h;
  }
  size_t size() const { return layers_.size(); }
  const std::shared_ptr<Module>& operator[](size_t i) const { return layers_.at(i); }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace kiln::nn
