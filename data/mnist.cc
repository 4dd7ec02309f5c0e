#include "data/mnist.h"

#include <filesystem>

#include "data/idx.h"

namespace kiln::data {
namespace {

/// `dir/base`, or `dir/base.gz` when only that exists; throws naming both candidates.
std::string find_file(const std::filesystem::path& dir, const std::string& base) {
  std::error_code ec;
  auto plain = dir / base, gz = dir / (base + ".gz");
  if (std::filesystem::is_regular_file(plain, ec)) return plain.string();
  if (std::filesystem::is_regular_file(gz, ec)) return gz.string();
  fail("MnistDataset: neither '{}' nor '{}' exists", plain.string(), gz.string());
}

}  // namespace

MnistData load_mnist(const std::string& dir, bool train, std::optional<Normalization> normalize) {
  std::error_code ec;
  KILN_CHECK(std::filesystem::is_directory(dir, ec),
             "MnistDataset: directory '{}' does not exist (Fashion-MNIST comes with Debian's "
             "dataset-fashion-mnist package, in {})",
             dir, kFashionMnistDir);
  if (normalize) {
    KILN_CHECK(normalize->std > 0, "MnistDataset: normalisation std must be positive, got {}", normalize->std);
  }
  const std::string split = train ? "train" : "t10k";
  MnistData out;
  out.images_path = find_file(dir, split + "-images-idx3-ubyte");
  out.labels_path = find_file(dir, split + "-labels-idx1-ubyte");

  IdxArray images = read_idx_raw(out.images_path);
  KILN_CHECK(images.type == IdxType::u8 && images.dims.size() == 3,
             "MnistDataset: '{}' holds {} {}, expected u8 images [N, H, W]", out.images_path,
             idx_type_name(images.type), images.dims);
  IdxArray labels = read_idx_raw(out.labels_path);
  KILN_CHECK(labels.type == IdxType::u8 && labels.dims.size() == 1,
             "MnistDataset: '{}' holds {} {}, expected u8 labels [N]", out.labels_path, idx_type_name(labels.type),
             labels.dims);
  KILN_CHECK(images.dims[0] == labels.dims[0], "MnistDataset: '{}' has {} images but '{}' has {} labels",
             out.images_path, images.dims[0], out.labels_path, labels.dims[0]);

  const int64_t n = images.dims[0], h = images.dims[1], w = images.dims[2];
  out.images = make_tensor({n, 1, h, w}, kFloat32, kCPU);
  float* px = out.images.data_ptr<float>();
  const uint8_t* src = images.bytes.data();
  const int64_t count = images.numel();
  if (normalize) {
    const float mean = static_cast<float>(normalize->mean), inv_std = static_cast<float>(1.0 / normalize->std);
    for (int64_t i = 0; i < count; ++i) px[i] = (static_cast<float>(src[i]) / 255.0f - mean) * inv_std;
  } else {
    for (int64_t i = 0; i < count; ++i) px[i] = static_cast<float>(src[i]) / 255.0f;
  }

  out.labels = make_tensor({n}, kInt64, kCPU);
  int64_t* lab = out.labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) lab[i] = labels.bytes[i];
  return out;
}

MnistDataset::MnistDataset(const std::string& dir, bool train, std::optional<Normalization> normalize)
    : MnistDataset(load_mnist(dir, train, normalize), train) {}

MnistDataset::MnistDataset(MnistData&& d, bool train)
    : TensorDataset(std::move(d.images), std::move(d.labels)),
      train_(train),
      images_path_(std::move(d.images_path)),
      labels_path_(std::move(d.labels_path)) {}

}  // namespace kiln::data
