// The main job's trainer with --model resnet18 (a Module that is not a Sequential, with
// BatchNorm buffers) on synthetic MNIST-format data: the images are padded to 32x32, the loss
// falls, a run interrupted mid-epoch resumes bit-identical (weights, running statistics,
// num_batches_tracked, SGD momentum), and the pipeline refuses it by name.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/ops.h"
#include "nn/safetensors.h"
#include "train/train_parts.h"
#include "train/trainer.h"
#include "tests/train/synthetic_mnist.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

train::TrainConfig config(const fs::path& dir) {
  train::TrainConfig c;
  c.model = "resnet18";
  c.width = 4;
  c.data_dir = dir.string();
  c.batch_size = 64;  // 640 images: 10 steps per epoch
  c.epochs = 2;
  c.lr = 0.1;
  c.log_every = 1000;
  c.device = kCPU;
  return c;
}

}  // namespace

TEST_CASE("resnet18: the images are padded to 32x32 with the normalised black") {
  const train::Datasets d = train::load_datasets(config(test::make_data_dir()));
  CHECK(d.train->get_batch({0}).data.sizes() == Shape{1, 1, 32, 32});
  const Tensor img = d.test->data().narrow(0, 0, 1);
  CHECK(img.sizes() == Shape{1, 1, 32, 32});
  const double black = -0.2860 / 0.3530;
  CHECK(img.narrow(2, 0, 2).min().item<double>() == doctest::Approx(black));
  CHECK(img.narrow(2, 0, 2).max().item<double>() == doctest::Approx(black));
  CHECK(img.narrow(3, 30, 2).max().item<double>() == doctest::Approx(black));
  auto mlp = config(test::make_data_dir());
  mlp.model = "mlp";
  CHECK(train::load_datasets(mlp).test->data().size(3) == 28);
}

TEST_CASE("resnet18 trains, and a run interrupted mid-epoch resumes bit-identical") {
  fs::path dir = test::make_data_dir();
  std::ostringstream log;
  auto c = config(dir);
  c.save = (dir / "resnet_full.safetensors").string();
  train::TrainResult full = train::train(c, log);
  REQUIRE(full.steps == 20);
  CHECK(full.epoch_train_loss.back() < full.epoch_train_loss.front());
  const auto json = nlohmann::json::parse(train::result_json(c, full));
  CHECK(json.at("model") == "resnet18");
  CHECK(json.at("width") == 4);
  const auto saved = nn::load_safetensors(c.save).tensors;
  CHECK(saved.at("model.layer4.1.bn2.num_batches_tracked").item<int64_t>() == 20);

  auto part = c;
  part.save = (dir / "resnet_part.safetensors").string();
  part.stop_after_steps = 13;  // epoch 1, batch 3: across the first evaluation
  train::TrainResult p1 = train::train(part, log);
  CHECK(p1.steps == 13);
  part.resume = part.save;
  part.stop_after_steps = 0;
  train::TrainResult p2 = train::train(part, log);
  CHECK(p2.steps == 20);
  std::vector<double> stitched = p1.step_losses;
  stitched.insert(stitched.end(), p2.step_losses.begin(), p2.step_losses.end());
  CHECK(stitched == full.step_losses);
  CHECK(p2.test_accuracy == full.test_accuracy);
  const auto resumed = nn::load_safetensors(part.save).tensors;
  for (const auto& [name, t] : saved) {
    INFO(name);
    REQUIRE(resumed.count(name) == 1);
    CHECK((resumed.at(name).to(kFloat64) - t.to(kFloat64)).abs().max().item<double>() == 0.0);
  }
}

TEST_CASE("resnet18 under --pipeline-stages is refused, naming the model") {
  auto c = config(test::make_data_dir());
  c.pipeline_stages = 2;
  std::ostringstream log;
  CHECK_THROWS_WITH(train::train(c, log), doctest::Contains("--model resnet18 is not one"));
}
