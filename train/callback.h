// The Trainer's callback interface (train/fit.h): hooks around the loop, called in the order the
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
