// Training checkpoints as safetensors files: model tensors under "model.<name>", optimizer state
// under "optim.<key>", and the training position (step, epoch, RNG state, user metadata) in the
// header's metadata, so a PyTorch user can open one with `safetensors.safe_open`.
// Promise: load_checkpoint reads and validates everything before it changes anything; a
// truncated, corrupt or mismatching file throws naming the file and leaves the model, the
// optimizer and the generator as they were.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/generator.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace kiln::train {

/// Where training stands, saved beside the weights.
struct TrainingState {
  int64_t step = 0;
  /// The epoch in progress, and how many of its batches are done: (e, 0) is the start of epoch e,
  /// (e, b) a checkpoint taken mid-epoch after its b-th step.
  int64_t epoch = 0;
  int64_t batch = 0;
  /// The generator state to restore on resume (usually kiln::default_generator().state()).
  GeneratorState rng;
  /// Free-form string metadata, saved as "extra.<key>".
  std::map<std::string, std::string> extra;
};

/// Writes `model`'s state_dict, `opt`'s state_dict (when not null) and `state` to `path`
/// atomically (see save_safetensors).
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer* opt,
                     const TrainingState& state);

/// As above, with the optimizer's state given as a state_dict and its name (for optimizers whose
/// state is assembled elsewhere, such as ZeRO's consolidated state).
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::StateDict& optim_state,
                     const std::string& optim_name, const TrainingState& state);

/// Restores a checkpoint into `model` (strict: same keys and shapes; floating tensors may be
/// saved in another floating dtype), `opt` (when not null; the file must then hold optimizer
/// state) and `rng` (when not null: set to the saved generator state), and returns the saved
/// TrainingState. Nothing is modified unless the whole file is valid and matches.
TrainingState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer* opt,
                              Generator* rng = &default_generator());

}  // namespace kiln::train
