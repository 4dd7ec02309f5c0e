// The compute side of the scaling model: forward, backward (with the moment each DDP gradient
// bucket has all its gradients) and optimizer times of ddp_bench's models on one rank, with no
// communication, while the other ranks do the same. ddp_bench times it in blocks interleaved with
// its DDP modes, so the compute the model is given ran at the same core allocation and under the
// same outside load as the DDP steps it predicts: on this 2-core VM, shared with other builds,
// ranks slow each other down by far more than max(1, ranks / cores). On GPUs each rank has its
// own device and a one-GPU profile is the input (docs/scaling.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/scaling_math.h"
#include "distributed/backend/process_group.h"

namespace kiln::bench {

/// This rank's medians over `steps` steps (after one warm-up) of ddp_bench's model `name` ("mlp",
/// "cnn", "wide_mlp"; seed 0), batch 128 of 1x28x28, SGD with momentum; buckets as
/// DistributedDataParallel makes them with its default options. Each step starts with a barrier
/// (untimed), as DDP's ranks run in step. cpu_s: the process's CPU time over the three phases
/// (below their wall time when the rank waited for a core).
StepProfile profile_compute(const std::string& name, const std::shared_ptr<dist::ProcessGroup>& pg, int steps);

/// Phase by phase the median of several profiles of the same model.
StepProfile median_profile(const std::vector<StepProfile>& profiles);

/// Phase by phase the slowest rank's (a collective): DDP's ranks wait for the slowest.
StepProfile slowest_rank(const StepProfile& mine, dist::ProcessGroup& pg);

nlohmann::ordered_json to_json(const StepProfile& p);
/// Reads a to_json object; throws naming the missing field.
StepProfile step_profile_from_json(const nlohmann::json& j);

}  // namespace kiln::bench
