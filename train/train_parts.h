// Pieces of the main job (train/trainer.cc) and the model-parallel example: the Fashion-MNIST
// data sets and the device of a rank.
#pragma once

#include <memory>

#include "data/dataset.h"
#include "data/mnist.h"
#include "train/trainer.h"

namespace kiln::train {

struct Datasets {
  std::shared_ptr<data::Dataset> train;  // the first limit_train images when set
  std::shared_ptr<data::TensorDataset> test;
};
/// Reads Fashion-MNIST (or MNIST) from config.data_dir; throws naming a missing directory. For a
/// model that takes 32x32 images (resnet18) both sets are padded with black borders of 2 pixels,
/// as torchvision's transforms.Pad(2) before Normalize.
Datasets load_datasets(const TrainConfig& c);

/// The device of this rank in a multi-process job: on GPUs one per rank of this node
/// (LOCAL_RANK, as torchrun users expect); `what` names the flag in the error when there are
/// fewer GPUs than ranks. Elsewhere config.device itself.
Device rank_device(const TrainConfig& c, const char* what);

}  // namespace kiln::train
