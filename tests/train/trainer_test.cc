// The main job's training loop on a small synthetic MNIST-format data set: the loss falls, the
// same seed gives bit-identical losses, and --resume continues a run exactly.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/ops.h"
#include "train/trainer.h"
#include "nn/safetensors.h"
#include "tests/train/synthetic_mnist.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

using test::make_data_dir;

train::TrainConfig config(const fs::path& dir, const std::string& model) {
  train::TrainConfig c;
  c.model = model;
  c.data_dir = dir.string();
  c.batch_size = 64;
  c.epochs = 2;
  c.lr = 0.05;
  c.log_every = 1000;
  c.device = kCPU;
  return c;
}

}  // namespace

TEST_CASE("the MLP learns the synthetic classes and the JSON line has the promised keys") {
  fs::path dir = make_data_dir();
  std::ostringstream log;
  auto c = config(dir, "mlp");
  train::TrainResult r = train::train(c, log);
  CHECK(r.epochs_done == 2);
  CHECK(r.step_losses.back() < 0.5 * r.step_losses.front());
  CHECK(r.test_accuracy > 0.9);
  const auto json = nlohmann::json::parse(train::result_json(c, r));  // one valid JSON object
  for (const char* key : {"model", "device", "epochs", "train_loss", "test_accuracy", "samples_per_sec", "wall_seconds"})
    CHECK_MESSAGE(json.contains(key), key);
  CHECK(json.at("model") == "mlp");
  CHECK(json.at("test_accuracy").get<double>() == doctest::Approx(r.test_accuracy));
  CHECK(log.str().find("epoch 2 done") != std::string::npos);
}

TEST_CASE("the CNN trains too") {
  fs::path dir = make_data_dir();
  std::ostringstream log;
  auto c = config(dir, "cnn");
  c.epochs = 1;
  train::TrainResult r = train::train(c, log);
  CHECK(r.step_losses.back() < r.step_losses.front());
}

TEST_CASE("the same seed gives bit-identical losses, and resume continues a run exactly") {
  // Adam with the default per-step cosine schedule: optimizer state, step count, schedule
  // position and data order must all come back.
  fs::path dir = make_data_dir();
  std::ostringstream log;
  auto c = config(dir, "mlp");
  c.optimizer = train::Optimizer::adam;
  c.lr = 1e-3;
  train::TrainResult full = train::train(c, log);
  train::TrainResult again = train::train(c, log);
  CHECK(full.step_losses == again.step_losses);

  fs::path ckpt = dir / "run.safetensors";
  auto first = c;
  first.stop_after_epochs = 1;  // as if interrupted after epoch 1 (the cosine schedule spans 2)
  first.save = ckpt.string();
  train::TrainResult part1 = train::train(first, log);
  auto second = c;
  second.resume = ckpt.string();
  train::TrainResult part2 = train::train(second, log);
  REQUIRE(part1.step_losses.size() + part2.step_losses.size() == full.step_losses.size());
  std::vector<double> stitched = part1.step_losses;
  stitched.insert(stitched.end(), part2.step_losses.begin(), part2.step_losses.end());
  CHECK(stitched == full.step_losses);
  CHECK(part2.test_accuracy == full.test_accuracy);
}

namespace {

/// The bytes of a file (two checkpoints are equal when their files are: same tensors, same
/// checksums, same position and generator state).
std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE(f.good());
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST_CASE("a run interrupted mid-epoch and resumed ends bit-identical to an uninterrupted one") {
  // Dropout draws from the generator and Adam keeps state: both must resume at the exact step.
  fs::path dir = make_data_dir();
  std::ostringstream log;
  auto c = config(dir, "mlp");  // 640 images, batch 64: 10 steps per epoch, 2 epochs
  c.optimizer = train::Optimizer::adam;
  c.lr = 1e-3;
  c.dropout = 0.2;
  c.save = (dir / "full.safetensors").string();
  train::TrainResult full = train::train(c, log);
  REQUIRE(full.steps == 20);

  auto part = c;
  part.save = (dir / "part.safetensors").string();
  part.save_every = 4;
  part.stop_after_steps = 7;  // epoch 0, batch 7
  train::TrainResult p1 = train::train(part, log);
  CHECK(p1.steps == 7);
  CHECK(!p1.preempted);
  CHECK(p1.epochs_done == 0);
  auto meta = nn::load_safetensors(part.save).metadata;
  CHECK(meta.at("kiln.epoch") == "0");
  CHECK(meta.at("kiln.batch") == "7");
  CHECK(meta.at("kiln.step") == "7");

  part.resume = part.save;
  part.stop_after_steps = 6;  // to epoch 1, batch 3, across the epoch boundary (and its eval)
  train::TrainResult p2 = train::train(part, log);
  CHECK(p2.steps == 13);
  CHECK(p2.epochs_done == 1);
  meta = nn::load_safetensors(part.save).metadata;
  CHECK(meta.at("kiln.epoch") == "1");
  CHECK(meta.at("kiln.batch") == "3");
  CHECK(log.str().find("resumed from " + part.save + " at epoch 0 batch 7 (step 7)") != std::string::npos);

  part.stop_after_steps = 0;
  train::TrainResult p3 = train::train(part, log);
  CHECK(p3.steps == 20);
  std::vector<double> stitched = p1.step_losses;
  stitched.insert(stitched.end(), p2.step_losses.begin(), p2.step_losses.end());
  stitched.insert(stitched.end(), p3.step_losses.begin(), p3.step_losses.end());
  CHECK(stitched == full.step_losses);
  CHECK(p3.test_accuracy == full.test_accuracy);
  CHECK(file_bytes(part.save) == file_bytes(c.save));  // weights, Adam state, generator: all equal
}

TEST_CASE("mid-epoch resume under f16 loss scaling continues the scaler exactly") {
  fs::path dir = make_data_dir();
  std::ostringstream log;
  auto c = config(dir, "mlp");
  c.epochs = 1;
  c.amp = train::Precision::f16;
  c.save = (dir / "amp_full.safetensors").string();
  train::TrainResult full = train::train(c, log);
  auto part = c;
  part.save = (dir / "amp_part.safetensors").string();
  part.stop_after_steps = 4;
  train::train(part, log);
  CHECK(nn::load_safetensors(part.save).metadata.at("kiln.batch") == "4");
  part.stop_after_steps = 0;
  part.auto_resume = true;
  train::TrainResult rest = train::train(part, log);
  CHECK(rest.steps == full.steps);
  CHECK(file_bytes(part.save) == file_bytes(c.save));
}

TEST_CASE("--cuda-graph refuses what a replay cannot do, naming the flag") {
  fs::path dir = make_data_dir();
  std::ostringstream log;
  auto c = config(dir, "mlp");
  c.cuda_graph = true;
  CHECK_THROWS_WITH_AS(train::train(c, log), doctest::Contains("--cuda-graph needs a CUDA device"), kiln::Error);
  c.device = Device(DeviceType::CUDA, 0);  // checked before any CUDA work: runs without a GPU
  c.schedule = train::Schedule::constant;
  c.optimizer = train::Optimizer::adam;
  CHECK_THROWS_WITH_AS(train::train(c, log), doctest::Contains("use --optimizer sgd"), kiln::Error);
  c.optimizer = train::Optimizer::sgd;
  c.schedule = train::Schedule::cosine;
  CHECK_THROWS_WITH_AS(train::train(c, log), doctest::Contains("use --schedule constant"), kiln::Error);
  c.schedule = train::Schedule::constant;
  c.dropout = 0.1;
  CHECK_THROWS_WITH_AS(train::train(c, log), doctest::Contains("new random mask each step"), kiln::Error);
  c.dropout = 0;
  c.amp = train::Precision::f16;
  CHECK_THROWS_WITH_AS(train::train(c, log), doctest::Contains("loss scaling"), kiln::Error);
  c.amp = train::Precision::f32;
  c.ddp = true;
  CHECK_THROWS_WITH_AS(train::train(c, log), doctest::Contains("not with --ddp"), kiln::Error);
}
