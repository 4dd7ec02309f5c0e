// The main job pipeline-parallel (--pipeline-stages P --micro-batches M): one rank per stage of
// the model, started by //distributed/launch; with --ddp, world = P x replicas (hybrid). The
// flags' parts of it: train/trainer.cc trains it as a train::Trainer with the train::Pipeline
// strategy (train/fit.h, fit_pipeline.h) beside the one-process and data-parallel runs.
#pragma once

#include <memory>

#include "data/dataset.h"
#include "distributed/backend/process_group.h"
#include "train/trainer.h"

namespace kiln::train {

/// Before joining the job, so that a wrong launch fails at once on every rank instead of at
/// rendezvous: WORLD_SIZE must be P (or a multiple of P with --ddp), and --resume's stage files
/// must all exist. Throws kiln::Error naming the flag and the value.
void check_pipeline_launch(const TrainConfig& c);

/// The Pipeline strategy of the flags over `world`. With --pipeline-balance time, rank 0 times
/// the layers on the first micro-batch of `train`.
Pipeline pipeline_strategy(const TrainConfig& c, std::shared_ptr<dist::ProcessGroup> world,
                           const data::Dataset& train);

/// Whether each epoch's last batch of a replica's `rows` images must be left out because it does
/// not split into the micro-batches.
bool pipeline_drops_last_batch(const TrainConfig& c, int64_t rows);

}  // namespace kiln::train
