// FSDP checkpoints. Sharded: each rank writes its shards and the optimizer's state over them to
// DIR/shard-<rank>-of-<world>.safetensors (temporary name, then rename), with the units' layout
// in every file's metadata; loading reads every file and keeps this rank's slice, so a
// checkpoint written by N ranks loads into M (resharding: parameters and every per-parameter
// optimizer buffer). Consolidated: the whole model's state dict, as one process saves it.
#pragma once

#include <string>

#include "distributed/fsdp/fsdp.h"
#include "optim/optimizer.h"

namespace kiln::dist {

/// A collective: every rank writes its file (under HSDP the first replica of each shard), then all
/// wait for each other. Creates `dir`.
void save_fsdp_checkpoint(const std::string& dir, FullyShardedDataParallel& fsdp, const optim::Optimizer& optimizer);

/// Loads a checkpoint written by any number of ranks into this job's shards and `optimizer`
/// (an optimizer over fsdp.shards(), of the kind that saved). Throws naming the file and what
/// differs (a missing shard file, another unit layout) before changing anything. Not a
/// collective.
void load_fsdp_checkpoint(const std::string& dir, FullyShardedDataParallel& fsdp, optim::Optimizer& optimizer);

/// Rank 0 writes the gathered model state (one-process names and shapes) to `path` as
/// safetensors (nn::load_safetensors / Module::load_state_dict read it). A collective.
void save_consolidated(const std::string& path, FullyShardedDataParallel& fsdp);

}  // namespace kiln::dist
