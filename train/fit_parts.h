// Pieces of train::Trainer computed from its options alone, apart from the loop so recipes and
// tests can call them: the learning rate a Schedule gives a step, the optimizer's parameter groups
// (FitOptions::decay), and the position a checkpoint that records only its step resumes at.
#pragma once

#include <cstdint>
#include <vector>

#include "nn/module.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "train/fit.h"

namespace kiln::train {

/// The learning rate of optimizer step `step` (0-based) of a run of `total_steps`:
///   constant:      lr;
///   cosine:        lr * (1 + cos(pi * step / total_steps)) / 2;
///   warmup_cosine: lr * (step + 1) / warmup_steps while step < warmup_steps, min_lr from
///                  total_steps on, and in between min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * p))
///                  with p = (step - warmup_steps) / max(total_steps - warmup_steps, 1).
double scheduled_lr(const FitOptions& o, int64_t step, int64_t total_steps);

/// Throws kiln::Error naming the option when the schedule's or the groups' options are bad.
void check_schedule_options(const FitOptions& o);

/// The optimizer's groups over `model`'s parameters: one group, or with `o.decay` the decayed
/// parameters first and then those it returns false for, with option weight_decay 0.
std::vector<optim::ParamGroup> fit_param_groups(const FitOptions& o, const nn::Module& model);

/// A checkpoint at (epoch 0, batch 0) past step 0 was written by a trainer that records only the
/// optimizer step (the GPT's pipelined and sharded trainers): it resumes at the position that
/// step implies for this loader, epoch step / steps_per_epoch and batch (step % steps_per_epoch) x
/// grad_accum. Other states are left as they are.
void position_from_step(TrainingState& state, int64_t steps_per_epoch, int64_t grad_accum);

}  // namespace kiln::train
