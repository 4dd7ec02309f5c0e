// The main job's flags as Trainer callbacks (see flag_callbacks.h).
#include "train/flag_callbacks.h"

namespace kiln::train {

void StopFlags::on_step_end(Trainer& t, const StepMetrics& step) {
  if (checkpoints_.after_step(step.step, ++run_steps_).stop) t.request_stop();
}

void StopFlags::on_epoch_end(Trainer& t, const EpochMetrics&) {
  if (c_.stop_after_epochs > 0 && ++epochs_ == c_.stop_after_epochs) t.request_stop();
}

void MonitorSteps::on_train_begin(Trainer&) { monitor_.step_begin(); }

void MonitorSteps::on_step_end(Trainer&, const StepMetrics& step) {
  monitor_.mark(phase_);
  monitor_.step_end(samples_, step.loss, step.lr, step.grad_norm, 1.0);
}

void MonitorSteps::on_epoch_end(Trainer& t, const EpochMetrics& e) {
  if (e.val_loss && e.val_accuracy) monitor_.test_metrics(*e.val_loss, *e.val_accuracy, t.step());
}

}  // namespace kiln::train
