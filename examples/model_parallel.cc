// Model parallel in one process: the main job's CNN split over two devices (convolutions on the
// first, fully connected layers on the second), trained for a few steps on Fashion-MNIST.
//   tools/bazel run //examples:model_parallel -- --steps 50
#include "examples/model_parallel.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "core/cli.h"
#include "core/parallel.h"
#include "data/dataloader.h"
#include "examples/models.h"
#include "examples/train_parts.h"

using namespace kiln;

int main(int argc, char** argv) {
  cli::App app("Trains the main job's CNN split over two devices of one process (model parallel).", "model_parallel");
  examples::TrainConfig c;
  c.model = "cnn";
  c.limit_train = 2048;
  int64_t steps = 30;
  app.add_option("--steps", steps, "training steps")->check(cli::range<int64_t>(1, 1000000));
  app.add_option("--batch-size", c.batch_size, "batch size")->check(cli::range<int64_t>(1, 1 << 20));
  app.add_option("--lr", c.lr, "SGD learning rate (momentum 0.9)")->check(cli::range(0.0, 100.0));
  app.add_option("--seed", c.seed, "seed for init and data order")->check(cli::range<int64_t>(0, INT64_MAX));
  app.add_option("--threads", c.threads, "CPU threads (0: all cores)")->check(cli::range(0, 1024));
  app.add_option("--data-dir", c.data_dir, "Fashion-MNIST/MNIST IDX files");
  app.add_option("--limit-train", c.limit_train, "use only the first N training images (0: all)")
      ->check(cli::range<int64_t>(0, INT64_MAX));
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    if (c.threads > 0) set_num_threads(c.threads);
    examples::Datasets sets = examples::load_datasets(c);
    examples::DevicePair dev = examples::model_parallel_devices();
    std::cout << "model parallel: " << dev.note << "\n";
    manual_seed(static_cast<uint64_t>(c.seed));
    examples::SplitModel model(*examples::make_cnn(), examples::kCnnSplit, dev.first, dev.second);
    auto opt = examples::make_optimizer(c, model.parameters());
    data::DataLoader loader(sets.train,
                            {.batch_size = c.batch_size, .shuffle = true, .seed = static_cast<uint64_t>(c.seed)});
    double loss = 0;
    for (int64_t step = 0; step < steps;) {
      for (data::Example& b : loader) {
        if (step == steps) break;
        // The images go to the first device, the labels to the second, where the logits are.
        Tensor l = nn::functional::cross_entropy(model.forward(b.data), b.target.to(dev.second));
        opt->zero_grad();
        l.backward();  // the gradient crosses back from the second device to the first
        opt->step();
        loss = l.item<double>();
        if (++step % 10 == 0) std::cout << fmt::format("step {}/{} loss {:.4f}\n", step, steps, loss);
      }
    }
    const nlohmann::ordered_json line = {{"model", "cnn"}, {"first", dev.first.str()},   {"second", dev.second.str()},
                                         {"steps", steps}, {"batch_size", c.batch_size}, {"loss", loss}};
    std::cout << line.dump() << std::endl;
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "model_parallel: %s\n", e.what());
    return 1;
  }
}
