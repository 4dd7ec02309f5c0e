// MNIST-format datasets (MNIST, Fashion-MNIST, KMNIST share the file names and layout): images
// as f32 [N, 1, H, W] scaled to [0, 1] (then optionally normalised), labels as i64 [N].
#pragma once

#include <optional>
#include <string>

#include "data/dataset.h"

namespace kiln::data {

/// Where Debian's dataset-fashion-mnist package installs the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// Per-channel normalisation applied after scaling to [0, 1]: x' = (x - mean) / std.
struct Normalization {
  double mean = 0.0;
  double std = 1.0;
};
/// Fashion-MNIST's training-set pixel statistics.
inline constexpr Normalization kFashionMnistNormalization{0.2860, 0.3530};
/// MNIST's.
inline constexpr Normalization kMnistNormalization{0.1307, 0.3081};

/// The tensors of one split and the files they came from.
struct MnistData {
  Tensor images;  // f32 [N, 1, H, W]
  Tensor labels;  // i64 [N]
  std::string images_path, labels_path;
};

/// Loads `{train,t10k}-{images-idx3,labels-idx1}-ubyte` from `dir`, each plain or with a `.gz`
/// suffix (the plain file wins when both exist). Images must be u8 [N, H, W], labels u8 [N],
/// and N must agree; otherwise the error names the files.
MnistData load_mnist(const std::string& dir = kFashionMnistDir, bool train = true,
                     std::optional<Normalization> normalize = std::nullopt);

/// load_mnist as a Dataset (rows of the two tensors; batches gathered with one index_select).
class MnistDataset : public TensorDataset {
 public:
  explicit MnistDataset(const std::string& dir = kFashionMnistDir, bool train = true,
                        std::optional<Normalization> normalize = std::nullopt);

  std::string name() const override { return train_ ? "MnistDataset(train)" : "MnistDataset(test)"; }
  bool is_train() const { return train_; }
  const std::string& images_path() const { return images_path_; }
  const std::string& labels_path() const { return labels_path_; }

 private:
  MnistDataset(MnistData&& d, bool train);

  bool train_;
  std::string images_path_, labels_path_;
};

}  // namespace kiln::data
