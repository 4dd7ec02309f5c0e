// The main job pipeline-parallel (--pipeline-stages P --micro-batches M): one rank per stage of
// the model, started by //distributed/launch; with --ddp, world = P x replicas (hybrid).
#pragma once

#include <ostream>

#include "train/trainer.h"

namespace kiln::train {

/// Trains config.model split into config.pipeline_stages stages over the ranks of the job, as a
/// train::Trainer with the train::Pipeline strategy (train/fit.h, fit_pipeline.h). Each rank of a
/// replica reads the same batches (stage 0 uses the images, the last stage the labels); the last
/// stage computes the loss and the test metrics and sends them up the pipeline, so rank 0 (stage
/// 0 of replica 0) logs and returns them as the one-process job does. --save/--resume use one
/// checkpoint per stage (dist::save_stage_checkpoint); --resume without --save continues writing
/// to the files it resumed from.
/// Throws kiln::Error naming the problem when the job does not fit the flags (world size, stages).
TrainResult train_pipeline(const TrainConfig& config, std::ostream& log);

}  // namespace kiln::train
