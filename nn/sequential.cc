#include "nn/sequential.h"

#include <typeinfo>

#include "nn/activation.h"
#include "nn/conv.h"

namespace kiln::nn {

bool Sequential::swapped_relu_pool(size_t i) const {
  if (i + 1 >= layers_.size()) return false;
  const Module &a = *layers_[i], &b = *layers_[i + 1];
  return typeid(a) == typeid(ReLU) && typeid(b) == typeid(MaxPool2d);
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (swapped_relu_pool(i)) {
      h = (*layers_[i])((*layers_[i + 1])(h));
      ++i;
    } else {
      h = (*layers_[i])(h);
    }
  }
  return h;
}

}  // namespace kiln::nn
