// Checkpoints of a pipeline: each stage saves and loads its own part (its layers under stage-local
// names, and its optimizer), or all stages together write one merged file with the unsplit
// model's names, which loads into the unsplit model (train::load_checkpoint) or into any split.
// Every function here is a collective over the pipeline's group: a failure on one stage throws
// on all of them. The merged helpers need a file system every stage sees (one host, or shared).
#pragma once

#include <functional>
#include <string>

#include "distributed/pipeline/pipeline.h"
#include "train/checkpoint.h"

namespace kiln::dist {

/// "ckpt.safetensors" -> "ckpt.stage1-of-4.safetensors": where stage 1 of 4 keeps its part.
std::string stage_checkpoint_path(const std::string& path, int stage, int stages);

/// Each stage writes its layers (stage-local names) and `opt` (when not null) to its own file.
void save_stage_checkpoint(Pipeline& pipe, const std::string& path, const optim::Optimizer* opt,
                           const train::TrainingState& state);
/// Each stage restores what save_stage_checkpoint wrote for it (same split required).
train::TrainingState load_stage_checkpoint(Pipeline& pipe, const std::string& path, optim::Optimizer* opt);

/// A stage's global name ("4.weight") as the merged file keys it; "" leaves the tensor out (a
/// copy of a weight another stage holds, e.g. a tied embedding).
using CheckpointRename = std::function<std::string(const std::string& global)>;

/// One file at `path` holding every stage's parameters and buffers under the unsplit model's
/// names (no optimizer state), as train::save_checkpoint(path, unsplit_model, nullptr, state) would.
/// `rename` (when given) maps the pipeline's layer-index names to the model's own.
void save_merged_checkpoint(Pipeline& pipe, const std::string& path, const train::TrainingState& state,
                            const CheckpointRename& rename = nullptr);
/// As above, with the optimizer state too: `optim_state` is this stage's part keyed as the unsplit
/// model's optimizer keys it (the caller maps its parameter indices), and the file gets their
/// union under `optim_name`, as train::save_checkpoint(path, unsplit_model, &unsplit_opt, state)
/// writes it. Keys several stages hold (group options) must hold the same values on each.
void save_merged_checkpoint(Pipeline& pipe, const std::string& path, const train::TrainingState& state,
                            const CheckpointRename& rename, const optim::StateDict& optim_state,
                            const std::string& optim_name);
/// Loads this stage's layers from a merged checkpoint (any split; the file must hold the whole
/// model) and returns its training state.
train::TrainingState load_merged_checkpoint(Pipeline& pipe, const std::string& path);

}  // namespace kiln::dist
