// The main job's progress lines (see epoch_log.h).
#include "train/epoch_log.h"

#include <fmt/format.h>

#include <cmath>

namespace kiln::train {

EpochLog::EpochLog(int64_t steps_per_epoch, int64_t log_every, std::ostream& out)
    : steps_per_epoch_(steps_per_epoch), log_every_(log_every), out_(out) {
  KILN_CHECK(log_every >= 1, "EpochLog: log_every must be >= 1, got {}", log_every);
}

void EpochLog::on_epoch_begin(Trainer&, int64_t epoch) {
  epoch_ = epoch;
  steps_ = samples_ = window_samples_ = 0;
  window_start_ = Clock::now();
}

void EpochLog::on_step_end(Trainer& trainer, const StepMetrics& step) {
  ++steps_;
  samples_ += step.samples;
  window_samples_ += step.samples;
  if (steps_ % log_every_ != 0) return;
  const double loss = std::isnan(step.loss) ? trainer.last_loss() : step.loss;  // cuda_graph: read only here
  const double window = std::chrono::duration<double>(Clock::now() - window_start_).count();
  out_ << fmt::format("epoch {} step {}/{} loss {:.4f} {:.0f} samples/s\n", epoch_ + 1, steps_, steps_per_epoch_, loss,
                      static_cast<double>(window_samples_) / window)
       << std::flush;  // a long job's log is read while it runs (and redirected to a file, cout is block-buffered)
  window_start_ = Clock::now();
  window_samples_ = 0;
}

void EpochLog::on_epoch_end(Trainer&, const EpochMetrics& m) {
  epoch_train_loss_.push_back(m.train_loss);
  test_loss_ = m.val_loss.value_or(0);
  test_accuracy_ = m.val_accuracy.value_or(0);
  out_ << fmt::format("epoch {} done: train_loss {:.4f} test_loss {:.4f} test_accuracy {:.4f} ({:.0f} samples/s)\n",
                      m.epoch + 1, m.train_loss, test_loss_, test_accuracy_,
                      static_cast<double>(samples_) / m.seconds);
}

}  // namespace kiln::train
