// The GPT recipe's callbacks on train::Trainer (train/gpt_fit.h): what its own loop did around the
// step before the Trainer ran it. RunSignature ties checkpoints to their run; StepReport prints the
// GPT's progress line, validates every eval_every steps, runs the profiler's schedule and fills a
// TrainResult; StopAfterSteps ends an invocation early (--stop-after-steps).
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

#include "data/dataloader.h"
#include "train/callback.h"
#include "train/gpt_trainer.h"
#include "train/run_monitor.h"

namespace kiln::train::gpt {

/// Writes the run's signature (run_signature: shape, sequence length, seed) into every checkpoint
/// as TrainingState::extra["gpt"], as the GPT's other trainers do, and refuses to resume a
/// checkpoint of another run, naming both; logs "resumed from PATH at step N" to `out`.
class RunSignature : public Callback {
 public:
  RunSignature(std::string signature, std::ostream& out) : signature_(std::move(signature)), out_(out) {}
  void save_state(const std::string& path, TrainingState& state, int rank) override;
  void load_state(const std::string& path, const TrainingState& state) override;

 private:
  std::string signature_;
  std::ostream& out_;
};

/// After every optimizer step: the step's loss averaged over the ranks (a collective under
/// DataParallel), its wall time (from the end of the previous step's report, the device
/// synchronised; a checkpoint written in between counts in it), the progress line every
/// log_every steps ("step 3/200 | loss 2.1 | lr 1e-3 | norm 0.9 | 52 ms | 9800 tok/s | mfu 4.1%"),
/// and the validation loss on `val` every eval_every steps and at max_steps (Trainer::evaluate;
/// its time is not the next step's). All of it lands in `result`; finish() adds the throughput.
class StepReport : public Callback {
 public:
  /// `tokens_per_step` over all ranks in sequences of `seq_len`; `flops_per_token`: the model's
  /// training FLOPs per token (GPT::flops_per_token).
  StepReport(const TrainConfig& c, TrainResult& result, data::DataLoader& val, int64_t seq_len, int64_t tokens_per_step,
             double flops_per_token, std::ostream& out);
  ~StepReport() override;

  void on_train_begin(Trainer& trainer) override;
  void on_step_end(Trainer& trainer, const StepMetrics& step) override;
  void on_train_end(Trainer& trainer, const FitResult& result) override;

  /// Sets the result's wall time (since on_train_begin), tokens/s, MFU and peak memory.
  void finish(const Device& device);

 private:
  const TrainConfig& c_;
  TrainResult& r_;
  data::DataLoader& val_;
  int64_t seq_len_, tokens_per_step_;
  int64_t last_ = 0;  // the last step of this invocation (--stop-after-steps), which always logs
  double flops_per_token_;
  std::ostream& out_;
  StepTimes times_;
  std::unique_ptr<RunMonitor> monitor_;  // --profile
};

/// Ends fit() after `steps` optimizer steps of this invocation (0: never); the Trainer writes its
/// checkpoint first, and the schedule still spans the whole run, so resuming continues it.
class StopAfterSteps : public Callback {
 public:
  explicit StopAfterSteps(int64_t steps) : steps_(steps) {}
  void on_train_begin(Trainer& trainer) override { first_ = trainer.step(); }
  void on_step_end(Trainer& trainer, const StepMetrics& step) override {
    if (steps_ > 0 && step.step - first_ >= steps_) trainer.request_stop();
  }

 private:
  int64_t steps_, first_ = 0;
};

}  // namespace kiln::train::gpt
