// The README's first program: define a model, train it on Fashion-MNIST, save a checkpoint.
#include <iostream>

#include "data/data.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "train/checkpoint.h"

using namespace kiln;

int main(int argc, char** argv) {
  manual_seed(0);
  nn::Sequential model{nn::Flatten(), nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 10)};
  optim::SGD opt(model.parameters(), optim::SGDOptions(0.05).set_momentum(0.9));
  data::DataLoader train(std::make_shared<data::MnistDataset>(), {.batch_size = 64, .shuffle = true});
  for (data::Example& batch : train) {  // one epoch
    opt.zero_grad();
    Tensor loss = nn::functional::cross_entropy(model.forward(batch.data), batch.target);
    loss.backward();
    opt.step();
  }
  data::MnistDataset test_set(data::kFashionMnistDir, /*train=*/false);
  NoGradGuard no_grad;
  Tensor correct = eq(model.forward(test_set.data()).argmax(1), test_set.targets());
  std::cout << "test accuracy " << correct.to(kFloat32).mean().item<double>() << "\n";
  train::save_checkpoint(argc > 1 ? argv[1] : "fashion_mlp.safetensors", model, &opt, {.epoch = 1});
}
