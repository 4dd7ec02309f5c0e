// Pipeline stage boundaries balanced by a cost per layer: by parameter count
// (balanced_boundaries, the Pipeline's default) or by measured forward time
// (time_balanced_boundaries), so that the slowest stage, which sets the step time, is as fast
// as it can be.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "distributed/backend/process_group.h"
#include "nn/sequential.h"

namespace kiln::dist {

/// Contiguous ranges of at least one layer each (p+1 boundaries from 0 to the layer count) that
/// minimise the largest stage's total cost. Throws when there are more stages than layers.
std::vector<int> balanced_boundaries_by_cost(const std::vector<double>& layer_cost, int stages);

/// Seconds of each layer's forward pass on `sample` (one micro-batch, on the model's device),
/// each layer fed the previous layer's output, without recording: the median of `repeats` runs
/// after one warm-up run.
std::vector<double> layer_forward_seconds(nn::Sequential& model, const Tensor& sample, int repeats = 5);

/// Boundaries for PipelineOptions::boundaries that split the model into `stages` stages of
/// equal forward time: rank 0 of `pg` times every layer on `sample` (read there only) and
/// broadcasts the times, so every rank of `pg` gets the same split. In a hybrid job pass the
/// world group (not a pipeline group), so that every replica splits alike. A collective: every
/// rank of `pg` calls it with the same model.
std::vector<int> time_balanced_boundaries(nn::Sequential& model, const Tensor& sample, int stages, ProcessGroup& pg,
                                          int repeats = 5);

}  // namespace kiln::dist
