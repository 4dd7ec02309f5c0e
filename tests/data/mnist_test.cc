// MnistDataset on a tiny synthetic directory written here, its errors, and (when Debian's
// dataset-fashion-mnist is installed) the real Fashion-MNIST files.
#include <filesystem>

#include "data/dataloader.h"
#include "data/mnist.h"
#include "tests/data/data_test_util.h"

using namespace kiln;
using namespace kiln::data;
using kiln::test::idx_bytes;
using kiln::test::write_bytes;

namespace {

/// Writes a split of n images of h x w (pixel = (i * 7 + p) % 256) and labels i % 10.
void write_split(const std::string& dir, const std::string& split, uint32_t n, uint32_t h, uint32_t w, bool gz,
                 uint32_t labels_n = 0) {
  std::vector<uint8_t> px(n * h * w), lab(labels_n ? labels_n : n);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t p = 0; p < h * w; ++p) px[i * h * w + p] = static_cast<uint8_t>((i * 7 + p) % 256);
  for (size_t i = 0; i < lab.size(); ++i) lab[i] = static_cast<uint8_t>(i % 10);
  auto images = idx_bytes(0x08, {n, h, w}, px);
  auto labels = idx_bytes(0x08, {static_cast<uint32_t>(lab.size())}, lab);
  std::string suffix = gz ? ".gz" : "";
  write_bytes(dir + "/" + split + "-images-idx3-ubyte" + suffix, gz ? test::gzip_bytes(images) : images);
  write_bytes(dir + "/" + split + "-labels-idx1-ubyte" + suffix, gz ? test::gzip_bytes(labels) : labels);
}

}  // namespace

TEST_CASE("MnistDataset loads plain and gzip splits as f32 [N,1,H,W] in [0,1] and i64 labels") {
  std::string dir = test::scratch_dir("mnist_small");
  write_split(dir, "train", 5, 4, 3, /*gz=*/false);
  write_split(dir, "t10k", 2, 4, 3, /*gz=*/true);

  MnistDataset train(dir, true);
  CHECK(train.size() == 5);
  CHECK(train.data().sizes() == Shape{5, 1, 4, 3});
  CHECK(train.data().dtype() == kFloat32);
  CHECK(train.targets().dtype() == kInt64);
  CHECK(train.targets().to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
  auto v = train.data().to_vector<float>();
  for (int i = 0; i < 5; ++i)
    for (int p = 0; p < 12; ++p) CHECK(v[i * 12 + p] == static_cast<float>((i * 7 + p) % 256) / 255.0f);
  Example e = train.get(3);
  CHECK(e.data.sizes() == Shape{1, 4, 3});
  CHECK(e.target.item<int64_t>() == 3);

  MnistDataset test_split(dir, false, kFashionMnistNormalization);
  CHECK(test_split.size() == 2);
  CHECK(test_split.images_path() == dir + "/t10k-images-idx3-ubyte.gz");
  float expected = (7.0f / 255.0f - 0.2860f) / 0.3530f;  // image 1, pixel 0
  CHECK(test_split.data().to_vector<float>()[12] == doctest::Approx(expected).epsilon(1e-6));
}

TEST_CASE("MnistDataset errors name the directory or the files") {
  std::string dir = test::scratch_dir("mnist_bad");
  CHECK_ERROR_HAS(MnistDataset(dir + "/nowhere"), dir + "/nowhere", "does not exist");
  CHECK_ERROR_HAS(MnistDataset(dir), dir + "/train-images-idx3-ubyte", "train-images-idx3-ubyte.gz");

  write_split(dir, "train", 6, 2, 2, /*gz=*/true, /*labels_n=*/5);
  CHECK_ERROR_HAS(MnistDataset(dir), "6 images", "5 labels", dir + "/train-images-idx3-ubyte.gz",
                  dir + "/train-labels-idx1-ubyte.gz");

  // Labels where images belong: a 1-D file is not an image set.
  std::string swapped = test::scratch_dir("mnist_swapped");
  write_bytes(swapped + "/t10k-images-idx3-ubyte", idx_bytes(0x08, {3}, {1, 2, 3}));
  write_bytes(swapped + "/t10k-labels-idx1-ubyte", idx_bytes(0x08, {3}, {1, 2, 3}));
  CHECK_ERROR_HAS(MnistDataset(swapped, false), swapped + "/t10k-images-idx3-ubyte", "expected u8 images");

  // A corrupt file surfaces the reader's error with the path.
  std::string corrupt = test::scratch_dir("mnist_corrupt");
  write_split(corrupt, "train", 4, 2, 2, /*gz=*/false);
  auto bytes = test::read_bytes(corrupt + "/train-images-idx3-ubyte");
  bytes.resize(bytes.size() - 1);
  write_bytes(corrupt + "/train-images-idx3-ubyte", bytes);
  CHECK_ERROR_HAS(MnistDataset(corrupt), corrupt + "/train-images-idx3-ubyte", "truncated");
}

TEST_CASE("Fashion-MNIST from Debian's dataset-fashion-mnist loads 60000/10000 with labels 0..9") {
  std::error_code ec;
  if (!std::filesystem::is_directory(kFashionMnistDir, ec)) {
    MESSAGE("skipped: ", kFashionMnistDir, " is absent (install Debian's dataset-fashion-mnist)");
    return;
  }
  MnistDataset train(kFashionMnistDir, true), test_split(kFashionMnistDir, false);
  CHECK(train.data().sizes() == Shape{60000, 1, 28, 28});
  CHECK(test_split.data().sizes() == Shape{10000, 1, 28, 28});
  for (const MnistDataset* d : {&train, &test_split}) {
    CHECK(d->targets().min().item<int64_t>() == 0);
    CHECK(d->targets().max().item<int64_t>() == 9);
    CHECK(d->data().min().item<float>() == 0.0f);
    CHECK(d->data().max().item<float>() == 1.0f);
  }
  // Fashion-MNIST is balanced: 6000 training images per class.
  auto labels = train.targets().to_vector<int64_t>();
  std::vector<int> counts(10, 0);
  for (int64_t l : labels) ++counts[static_cast<size_t>(l)];
  CHECK(counts == std::vector<int>(10, 6000));
  CHECK(train.data().mean().item<double>() == doctest::Approx(kFashionMnistNormalization.mean).epsilon(1e-3));

  // A few batches through the loader, as the examples use it.
  DataLoaderOptions opts;
  opts.batch_size = 256;
  opts.shuffle = true;
  opts.num_workers = 2;
  opts.seed = 1;
  DataLoader loader(std::make_shared<MnistDataset>(kFashionMnistDir, false), opts);
  CHECK(loader.size() == 40);
  int64_t seen = 0;
  for (Example& b : loader) seen += b.data.size(0);
  CHECK(seen == 10000);
}
