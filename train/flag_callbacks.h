// Callbacks that give the main job's flags to a train::Trainer run (the pipelined main job and the
// model-parallel example): --stop-after-steps/--stop-after-epochs and SIGTERM/SIGINT (StepCheckpoints,
// agreed over the ranks), and --profile/--logdir/the breakdown lines (RunMonitor), which sees
// each optimizer step as one phase, as the Trainer's callbacks show no finer one.
#pragma once

#include <cstdint>
#include <ostream>

#include "train/callback.h"
#include "train/run_monitor.h"
#include "train/train_parts.h"

namespace kiln::train {

/// Asks the Trainer to stop (it saves first) after config.stop_after_steps steps or
/// config.stop_after_epochs epochs of this run, or when a signal came (on every rank alike).
class StopFlags : public Callback {
 public:
  /// `config` must outlive the callback; `pg` (null: one process) agrees the signal over the ranks.
  StopFlags(const TrainConfig& config, dist::ProcessGroup* pg) : c_(config), checkpoints_(config, pg) {}
  void on_step_end(Trainer& t, const StepMetrics& step) override;
  void on_epoch_end(Trainer& t, const EpochMetrics& metrics) override;
  /// A signal stopped the run (the job exits with dist::kExitPreempted).
  bool preempted() const { return checkpoints_.preempted(); }

 private:
  const TrainConfig& c_;
  StepCheckpoints checkpoints_;
  int64_t run_steps_ = 0, epochs_ = 0;
};

/// RunMonitor driven by the Trainer's steps: each step's time is booked to `phase`, with
/// `samples_per_step` samples (all ranks together); the validation metrics go to TensorBoard.
class MonitorSteps : public Callback {
 public:
  MonitorSteps(const TrainConfig& config, int rank, double flops_per_sample, Phase phase, int64_t samples_per_step,
               std::ostream& out)
      : monitor_(monitor_config(config), rank, flops_per_sample, config.device.is_cuda(), out),
        phase_(phase),
        samples_(samples_per_step) {}
  void on_train_begin(Trainer& t) override;
  void on_step_end(Trainer& t, const StepMetrics& step) override;
  void on_epoch_end(Trainer& t, const EpochMetrics& metrics) override;
  double mfu() const { return monitor_.mfu(); }

 private:
  RunMonitor monitor_;
  Phase phase_;
  int64_t samples_;
};

}  // namespace kiln::train
