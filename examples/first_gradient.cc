// The first program of docs/api.md: build a tensor, take a gradient.
#include <iostream>

#include "autograd/autograd.h"

using namespace kiln;

int main() {
  manual_seed(0);
  Tensor w = randn({3, 2}, kFloat32).set_requires_grad(true);
  Tensor x = randn({4, 3});
  Tensor loss = matmul(x, w).relu().pow(2).mean();
  loss.backward();
  std::cout << "loss = " << loss << "\n" << "dloss/dw = " << w.grad() << "\n";
}
