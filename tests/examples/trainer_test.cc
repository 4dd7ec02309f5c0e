// The main job's training loop on a small synthetic MNIST-format data set: the loss falls, the
// same seed gives bit-identical losses, and --resume continues a run exactly.
#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "core/ops.h"
#include "examples/trainer.h"

using namespace kiln;
namespace fs = std::filesystem;

namespace {

void write_idx_gz(const fs::path& path, const std::vector<uint8_t>& header, const std::vector<uint8_t>& body) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  gzwrite(f, header.data(), static_cast<unsigned>(header.size()));
  gzwrite(f, body.data(), static_cast<unsigned>(body.size()));
  gzclose(f);
}

std::vector<uint8_t> be32(uint32_t v) {
  return {static_cast<uint8_t>(v >> 24), static_cast<uint8_t>(v >> 16), static_cast<uint8_t>(v >> 8),
          static_cast<uint8_t>(v)};
}

/// A learnable 10-class problem in MNIST layout: class c lights up row block c of the image.
void write_split(const fs::path& dir, const std::string& prefix, uint32_t n, uint32_t seed) {
  std::vector<uint8_t> images(n * 28 * 28), labels(n);
  uint32_t state = seed;
  auto next = [&] { state = state * 1664525u + 1013904223u; return state >> 24; };
  for (uint32_t i = 0; i < n; ++i) {
    labels[i] = static_cast<uint8_t>(i % 10);
    for (uint32_t p = 0; p < 28 * 28; ++p) {
      uint32_t row = p / 28;
      bool on = row / 2 == labels[i] || row / 2 == labels[i] + 3;
      images[i * 784 + p] = static_cast<uint8_t>((on ? 160 : 0) + next() % 64);
    }
  }
  std::vector<uint8_t> ih{0, 0, 8, 3}, lh{0, 0, 8, 1};
  for (uint32_t v : {n, 28u, 28u}) for (uint8_t b : be32(v)) ih.push_back(b);
  for (uint8_t b : be32(n)) lh.push_back(b);
  write_idx_gz(dir / (prefix + "-images-idx3-ubyte.gz"), ih, images);
  write_idx_gz(dir / (prefix + "-labels-idx1-ubyte.gz"), lh, labels);
}

fs::path make_data_dir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  fs::path dir = fs::path(tmp ? tmp : "/tmp") / "synthetic-mnist";
  fs::create_directories(dir);
  write_split(dir, "train", 640, 1);
  write_split(dir, "t10k", 200, 2);
  return dir;
}

examples::TrainConfig config(const fs::path& dir, const std::string& model) {
  examples::TrainConfig c;
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
  examples::TrainResult r = examples::train(c, log);
  CHECK(r.epochs_done == 2);
  CHECK(r.step_losses.back() < 0.5 * r.step_losses.front());
  CHECK(r.test_accuracy > 0.9);
  std::string json = examples::result_json(c, r);
  for (const char* key : {"\"model\"", "\"device\"", "\"epochs\"", "\"train_loss\"", "\"test_accuracy\"",
                          "\"samples_per_sec\"", "\"wall_seconds\""})
    CHECK_MESSAGE(json.find(key) != std::string::npos, key);
  CHECK(log.str().find("epoch 2 done") != std::string::npos);
}

TEST_CASE("the CNN trains too") {
  fs::path dir = make_data_dir();
  std::ostringstream log;
  auto c = config(dir, "cnn");
  c.epochs = 1;
  examples::TrainResult r = examples::train(c, log);
  CHECK(r.step_losses.back() < r.step_losses.front());
}

TEST_CASE("the same seed gives bit-identical losses, and resume continues a run exactly") {
  // Adam with the default per-step cosine schedule: optimizer state, step count, schedule
  // position and data order must all come back.
  fs::path dir = make_data_dir();
  std::ostringstream log;
  auto c = config(dir, "mlp");
  c.optimizer = "adam";
  c.lr = 1e-3;
  examples::TrainResult full = examples::train(c, log);
  examples::TrainResult again = examples::train(c, log);
  CHECK(full.step_losses == again.step_losses);

  fs::path ckpt = dir / "run.safetensors";
  auto first = c;
  first.stop_after_epochs = 1;  // as if interrupted after epoch 1 (the cosine schedule spans 2)
  first.save = ckpt.string();
  examples::TrainResult part1 = examples::train(first, log);
  auto second = c;
  second.resume = ckpt.string();
  examples::TrainResult part2 = examples::train(second, log);
  REQUIRE(part1.step_losses.size() + part2.step_losses.size() == full.step_losses.size());
  std::vector<double> stitched = part1.step_losses;
  stitched.insert(stitched.end(), part2.step_losses.begin(), part2.step_losses.end());
  CHECK(stitched == full.step_losses);
  CHECK(part2.test_accuracy == full.test_accuracy);
}
