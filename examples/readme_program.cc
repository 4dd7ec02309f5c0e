// The README's first program: define a model, train it on Fashion-MNIST with the Trainer (early
// stopping on the test loss, a checkpoint per epoch), print the test accuracy.
#include <iostream>

#include "data/data.h"
#include "nn/nn.h"
#include "train/callbacks.h"

using namespace kiln;

int main(int argc, char** argv) {
  manual_seed(0);
  nn::ModulePtr<> model = nn::Sequential{nn::Flatten(), nn::Linear(784, 128), nn::ReLU(), nn::Linear(128, 10)};
  data::DataLoader train_loader(std::make_shared<data::MnistDataset>(), {.batch_size = 64, .shuffle = true});
  data::DataLoader test_loader(std::make_shared<data::MnistDataset>(data::kFashionMnistDir, /*train=*/false),
                               {.batch_size = 1000});
  train::Trainer trainer(model, {.epochs = 2, .lr = 0.05, .log_every = 300,
                                 .checkpoint = argc > 1 ? argv[1] : "fashion_mlp.safetensors"});
  trainer.add_callback(std::make_shared<train::EarlyStopping>(train::EarlyStoppingOptions{.patience = 1}));
  trainer.fit(train_loader, &test_loader);  // resumes from the checkpoint when there is one
  std::cout << "test accuracy " << *trainer.evaluate(test_loader).accuracy << "\n";
}
