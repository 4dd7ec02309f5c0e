// Checkpoints under data parallel. Every rank holds the same model, so rank 0 alone writes
// (atomically, see train::save_checkpoint) while the others wait at a barrier: when the call
// returns on any rank, the file is complete. Loading is per rank: each reads the file into its
// own model and optimizer, whose tensors stay on that rank's device.
#pragma once

#include <string>

#include "distributed/backend/process_group.h"
#include "train/checkpoint.h"

namespace kiln::dist {

void save_checkpoint(ProcessGroup& pg, const std::string& path, const nn::Module& model,
                     const optim::Optimizer* opt, const train::TrainingState& state);

/// Every rank loads; a rank that fails (a missing or corrupt file) throws, and so do the others
/// (the outcome is agreed through the group, so nobody trains on while a peer has stopped).
train::TrainingState load_checkpoint(ProcessGroup& pg, const std::string& path, nn::Module& model,
                                  optim::Optimizer* opt);

}  // namespace kiln::dist
