// The Trainer's ModelParallel strategy (train/fit.h): the Sequential's parts placed on their
// devices of this process (train/model_parallel.h's PlacedSequential). The Trainer's loop, its
// evaluation and its checkpoints then run unchanged: the parts keep the model's layer names.
#pragma once

#include "core/device.h"
#include "nn/module.h"
#include "train/fit.h"

namespace kiln::train {

/// Checks the strategy against the model (an nn::Sequential with at least one layer per device,
/// valid boundaries), cuts it (by `parts.boundaries`, or to equal parameter counts) and moves each
/// part to its device. Sets `device` to the last device, where the output, the targets and the
/// loss are. Throws kiln::Error naming the model type or the offending value.
nn::ModulePtr<> place_model_parallel(const nn::ModulePtr<>& model, const ModelParallel& parts, Device& device);

}  // namespace kiln::train
