// A small MLP trained on random data from outside Kiln's workspace: exits 0 only if the loss fell.
#include <cstdio>

#include "nn/nn.h"
#include "optim/optim.h"

using namespace kiln;

int main() {
  manual_seed(0);
  nn::Sequential model{nn::Linear(8, 32), nn::ReLU(), nn::Linear(32, 1)};
  optim::Adam opt(model.parameters(), 1e-2);
  Tensor x = randn({64, 8}), y = x.sum({1}, /*keepdim=*/true).tanh();  // a learnable target
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    opt.zero_grad();
    Tensor loss = nn::functional::mse_loss(model.forward(x), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  std::printf("loss %.4f -> %.4f\n", first, last);
  return last < 0.1 * first ? 0 : 1;
}
