// The pipelined GPT's checkpoints in the one-process trainer's format: one merged file with the
// weights under the GPT's names and AdamW's state indexed as the one-process optimizer indexes it
// (make_optimizer over the whole GPT), so a pipelined run resumes its own checkpoints into any
// split, resumes the one-process trainer's, and the one-process trainer resumes its.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/pipeline/pipeline.h"
#include "distributed/tensor_parallel/parallel_layout.h"
#include "train/gpt_trainer.h"
#include "optim/optimizer.h"

namespace kiln::train::gpt {

/// What the last stage calls the head's copy of wte among its parameters (its optimizer state is
/// wte's: the copies get the same gradients and updates).
inline constexpr const char* kHeadCopy = "wte.weight (the head's copy)";

/// The parameter names of make_optimizer(c, named), group by group, in its index order.
std::vector<std::vector<std::string>> optimizer_layout(const TrainConfig& c, const nn::NamedTensors& named);

/// Translates a stage optimizer's state_dict to the one-process optimizer's keys and back.
class StageOptimizerMap {
 public:
  /// `whole`: optimizer_layout of the unsplit GPT; `stage`: of this stage's parameters (GPT names,
  /// kHeadCopy for the head's copy). The same number of groups in both.
  StageOptimizerMap(const std::vector<std::vector<std::string>>& whole,
                    const std::vector<std::vector<std::string>>& stage);
  /// This stage's part of the one-process state_dict (the head's copy left out: wte's is saved).
  optim::StateDict to_whole(const optim::StateDict& stage) const;
  /// This stage's state from a one-process state_dict (the head's copy takes wte's).
  optim::StateDict to_stage(const optim::StateDict& whole) const;

 private:
  std::vector<int64_t> whole_index_;            // by stage index: the one-process index
  std::vector<bool> copy_;                      // by stage index: the head's copy
  std::vector<std::vector<int64_t>> whole_groups_, stage_groups_;  // each group's indices
};

/// Writes the merged checkpoint (weights, optimizer state, `state`) to `path`; `state.rng` is
/// stage 0's generator, and every stage's is kept beside it for a resume into the same split.
/// A collective over the pipeline's group.
void save_pipeline_checkpoint(dist::Pipeline& pipe, const std::string& path, const StageOptimizerMap& map,
                              const optim::Optimizer& opt, train::TrainingState state);

/// The 3D (data x pipeline x tensor) run's checkpoint in the same merged format: each stage's
/// shards put together over the tensor group (models::gpt::whole_of, weights and AdamW's moments),
/// the stages' tensors collected on stage 0 over the pipeline group, the file written by rank 0
/// (data 0, stage 0, tensor 0). `whole_shapes`: the GPT's parameters in order with their whole
/// shapes; `whole_layout`: optimizer_layout of the whole GPT; `stage_names`: the stage optimizer's parameters by index (GPT names, kHeadCopy). A
/// collective over every rank (data ranks other than 0 only wait).
void save_tensor_parallel_pipeline_checkpoint(dist::Pipeline& pipe, const dist::ParallelGroups& groups,
                                              const std::string& path, const TrainConfig& c,
                                              const std::vector<std::pair<std::string, Shape>>& whole_shapes,
                                              const std::vector<std::vector<std::string>>& whole_layout,
                                              const StageOptimizerMap& map,
                                              const std::vector<std::string>& stage_names,
                                              const optim::Optimizer& opt, const train::TrainingState& state);

/// A stage optimizer's state (StageOptimizerMap::to_stage of the one-process state) with every
/// moment cut to this tensor rank's shard (models::gpt::shard_of).
optim::StateDict tensor_parallel_stage_state(const optim::StateDict& stage_whole,
                                             const std::vector<std::string>& stage_names,
                                             const dist::ProcessGroup& tensor);

/// Before the split: loads `path` (either trainer's checkpoint) into the whole `model` and a
/// one-process optimizer over it, whose state_dict it returns in `whole_optimizer`. Sets the
/// generator to the saved one.
train::TrainingState load_whole_checkpoint(const TrainConfig& c, const std::string& path, GPT& model,
                                        optim::StateDict& whole_optimizer);

/// After the split: this stage's generator as it was when `state` was saved, when it was saved
/// by a pipeline of the same split (stage 0's otherwise, as load_whole_checkpoint set it).
void restore_stage_generator(dist::Pipeline& pipe, const train::TrainingState& state);

}  // namespace kiln::train::gpt
