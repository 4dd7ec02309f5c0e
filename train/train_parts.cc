// The data sets and per-rank device of the main job (see train_parts.h).
#include "train/train_parts.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "models/build_model.h"
#include "nn/functional.h"

namespace kiln::train {

namespace {

/// `ds` with its images padded to `side` x `side` by borders of black pixels (the normalised value
/// of 0, so the border looks like the images' own background); `ds` itself when it has that size.
std::shared_ptr<data::TensorDataset> pad_images(std::shared_ptr<data::TensorDataset> ds, int64_t side) {
  const int64_t h = ds->data().size(2), w = ds->data().size(3);
  if (h == side && w == side) return ds;
  KILN_CHECK(h <= side && w <= side && (side - h) % 2 == 0 && (side - w) % 2 == 0,
             "mnist: {}x{} images do not pad evenly to the model's {}x{}", h, w, side, side);
  const double black = (0.0 - data::kFashionMnistNormalization.mean) / data::kFashionMnistNormalization.std;
  const int64_t ph = (side - h) / 2, pw = (side - w) / 2;
  Tensor padded = nn::functional::pad(ds->data(), {pw, pw, ph, ph}, PadMode::constant, black);
  return std::make_shared<data::TensorDataset>(padded, ds->targets());
}

}  // namespace

Datasets load_datasets(const TrainConfig& c) {
  KILN_CHECK(std::filesystem::is_directory(c.data_dir), "mnist: data directory '{}' does not exist (use --data-dir)",
             c.data_dir);
  auto full_train = std::make_shared<data::MnistDataset>(c.data_dir, /*train=*/true, data::kFashionMnistNormalization);
  std::shared_ptr<data::TensorDataset> train = full_train;
  if (c.limit_train > 0 && c.limit_train < full_train->size())
    train = std::make_shared<data::TensorDataset>(full_train->data().narrow(0, 0, c.limit_train),
                                                  full_train->targets().narrow(0, 0, c.limit_train));
  const int64_t side = models::input_size(c.model);
  auto test = std::make_shared<data::MnistDataset>(c.data_dir, /*train=*/false, data::kFashionMnistNormalization);
  return {pad_images(train, side), pad_images(test, side)};
}

Device rank_device(const TrainConfig& c, const char* what) {
  if (!c.device.is_cuda()) return c.device;
  const char* local = std::getenv("LOCAL_RANK");
  Device d(DeviceType::CUDA, local ? std::atoi(local) : 0);
  KILN_CHECK(d.index < device_count(DeviceType::CUDA),
             "{}: LOCAL_RANK {} has no GPU of its own ({} CUDA devices here); start at most that many ranks per node",
             what, d.index, device_count(DeviceType::CUDA));
  return d;
}

}  // namespace kiln::train
