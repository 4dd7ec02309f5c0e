// Checkpoints of a ZeRO-1 run, in two forms (both collectives: every rank calls them):
//  - consolidated: one ordinary Kiln checkpoint (train::save_checkpoint's format) holding the
//    optimizer state an unsharded run would have; an unsharded run loads it with
//    nn/dist::load_checkpoint, and a ZeRO run of any world size loads it here.
//  - sharded: `path` holds the model and training state, and each rank writes its own shard of
//    the optimizer state beside it (`path` + ".zero-shard-<r>-of-<N>"), with no gathering; only a
//    run with the same world size and buckets loads it.
// Every file is written to a temporary name and renamed. The main file is written last, so when
// it exists every shard does. A failure on any rank fails the call on every rank.
#pragma once

#include <string>

#include "distributed/data_parallel/zero.h"
#include "train/checkpoint.h"

namespace kiln::dist {

enum class ZeroCheckpointKind { kConsolidated, kSharded };

void save_zero_checkpoint(const std::string& path, const nn::Module& model, ZeroRedundancyOptimizer& opt,
                          const train::TrainingState& state,
                          ZeroCheckpointKind kind = ZeroCheckpointKind::kConsolidated);

/// Loads either form (told apart by the file's metadata) into every rank's model and shard.
/// Nothing changes on a rank whose files are invalid, and every rank throws then.
train::TrainingState load_zero_checkpoint(const std::string& path, nn::Module& model, ZeroRedundancyOptimizer& opt);

/// The file rank `rank` of `world` writes its shard to.
std::string zero_shard_path(const std::string& path, int rank, int world);

}  // namespace kiln::dist
