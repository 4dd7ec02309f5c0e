// The GPT recipe on train::Trainer: one process, --ddp and --ddp --zero 1 (train() in
// gpt_trainer.h sends --pipeline-stages to gpt_pipeline.h and --tp / --zero 2|3 to gpt_sharded.h,
// whose loops are their own). What the GPT's own loop used to do is typed Trainer options, data
// and callbacks here:
//   - the data: data::text::TokenWindows, random windows of the training bytes read in order (the
//     rows the GPT has always drawn, a function of (seed, row)), sequential ones for validation;
//   - AdamW with betas (beta1, beta2) and no decay on biases, LayerNorms and embeddings
//     (FitOptions::decay = weight_decayed), Schedule::warmup_cosine to min_lr, clipping,
//     accumulation up to --total-batch-tokens, Precision::bf16 / f16 autocast;
//   - callbacks (gpt_callbacks.h): the progress line and validation every eval_every steps,
//     the run's signature in its checkpoints, --stop-after-steps; the Trainer's checkpoints resume
//     exactly; then the sample and the Hugging Face export.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>

#include "train/fit.h"
#include "train/gpt_trainer.h"

namespace kiln::train::gpt {

/// The Trainer's options for `c` with `accum` micro-batches per step, over `pg` (null: one
/// process): as above, checkpoints to c.save (every save_every steps and at the end) resumed from
/// c.resume, the Trainer's own progress lines off (StepReport prints the GPT's), its other lines
/// to `log`. Throws naming --amp when it is not none, bf16 or f16.
FitOptions fit_options(const TrainConfig& c, int64_t accum, std::shared_ptr<dist::ProcessGroup> pg, std::ostream& log);

/// Trains `config` in one process or under --ddp (--zero 0 or 1) through train::Trainer; rank 0
/// logs to `log`. Throws kiln::Error on bad input, naming the flag.
TrainResult fit(const TrainConfig& config, std::ostream& log);

}  // namespace kiln::train::gpt
