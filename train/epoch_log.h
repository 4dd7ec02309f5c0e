// The main job's progress lines as a Trainer callback (train/callback.h), in the format its users
// and tests read:
//   epoch 1 step 20/100 loss 0.5123 6532 samples/s        every `log_every` steps of the epoch
//   epoch 1 done: train_loss 0.6 test_loss 0.5 test_accuracy 0.8 (6500 samples/s)
// (steps counted from the epoch's start in this invocation, the loss that of the step, samples
// of all ranks). It also keeps what the closing JSON line reports: each epoch's training loss and
// the last validation, run on the test set.
#pragma once

#include <chrono>
#include <cstdint>
#include <ostream>
#include <vector>

#include "train/callback.h"

namespace kiln::train {

class EpochLog : public Callback {
 public:
  /// `steps_per_epoch`: this rank's optimizer steps per epoch (the N of "step S/N"); `out`: rank
  /// 0's log (a null stream on the others).
  EpochLog(int64_t steps_per_epoch, int64_t log_every, std::ostream& out);

  void on_epoch_begin(Trainer& trainer, int64_t epoch) override;
  void on_step_end(Trainer& trainer, const StepMetrics& step) override;
  void on_epoch_end(Trainer& trainer, const EpochMetrics& metrics) override;

  /// The all-reduced mean training loss of each epoch this invocation completed.
  const std::vector<double>& epoch_train_loss() const { return epoch_train_loss_; }
  /// The last epoch end's test metrics (0 before one).
  double test_loss() const { return test_loss_; }
  double test_accuracy() const { return test_accuracy_; }

 private:
  using Clock = std::chrono::steady_clock;
  int64_t steps_per_epoch_, log_every_;
  std::ostream& out_;
  int64_t epoch_ = 0, steps_ = 0, samples_ = 0, window_samples_ = 0;
  Clock::time_point window_start_ = Clock::now();
  std::vector<double> epoch_train_loss_;
  double test_loss_ = 0, test_accuracy_ = 0;
};

}  // namespace kiln::train
