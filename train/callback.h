// The Trainer's callback interface (train/fit.h): hooks around the loop and inside each step
// (data, forward, backward, optimizer: what train/run_monitor.h times), called in the order the
// callbacks were added, on every rank (under DataParallel with the same, all-reduced metrics, so
// every rank decides alike). Callbacks with state that a resumed run needs save it with the
// checkpoint (save_state/load_state); train/callbacks.h has early stopping, EMA of the weights
// and ReduceLROnPlateau.
#pragma once

#include <string>

#include "train/checkpoint.h"
#include "train/fit.h"

namespace kiln::train {

class Callback {
 public:
  virtual ~Callback() = default;

  /// Before the first step of fit(), after a checkpoint was resumed (load_state ran).
  virtual void on_train_begin(Trainer& trainer) {}
  /// At the start of each epoch's training (before its first batch is fetched; `epoch` 0-based).
  virtual void on_epoch_begin(Trainer& trainer, int64_t epoch) {}
  /// Each micro-batch, as it arrives from the loader (before it moves to the device): the time
  /// since the previous step ended (or the epoch began) is the wait for data.
  virtual void on_batch_begin(Trainer& trainer, const data::Example& batch) {}
  /// After the micro-batch's forward pass and loss (`loss` on the device; reading it syncs). Under
  /// Pipeline, after the micro-batch's pipeline step (forward and backward interleave there):
  /// its loss as a 0-dim f64 tensor on the last stage, an undefined tensor on the others.
  virtual void on_after_forward(Trainer& trainer, const Tensor& loss) {}
  /// After its backward (under DataParallel: the gradients of the step's last micro-batch are
  /// all-reduced when this runs).
  virtual void on_after_backward(Trainer& trainer) {}
  /// Once per optimizer step, after clipping and the schedule, just before the optimizer step
  /// (the gradients are still there).
  virtual void on_before_optimizer_step(Trainer& trainer) {}
  /// After each optimizer step (trainer.request_stop() ends the run after it).
  virtual void on_step_end(Trainer& trainer, const StepMetrics& step) {}
  /// Around each validation of fit() (EMA swaps its weights in and out here).
  virtual void on_validation_begin(Trainer& trainer) {}
  virtual void on_validation_end(Trainer& trainer) {}
  /// After the epoch's validation, before its checkpoint (so state changed here is saved).
  virtual void on_epoch_end(Trainer& trainer, const EpochMetrics& metrics) {}
  /// When fit() returns normally.
  virtual void on_train_end(Trainer& trainer, const FitResult& result) {}

  /// Adds this callback's state to a checkpoint about to be written to `path`: string metadata
  /// into `state.extra` (keys prefixed with the callback's name), or files of its own beside
  /// `path`. Every rank calls it; only rank 0 should write files.
  virtual void save_state(const std::string& path, TrainingState& state, int rank) {}
  /// Restores what save_state wrote, from the checkpoint at `path` being resumed.
  virtual void load_state(const std::string& path, const TrainingState& state) {}
};

}  // namespace kiln::train
