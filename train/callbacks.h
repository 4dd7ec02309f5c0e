// The Trainer's stock callbacks (train/callback.h): early stopping and ReduceLROnPlateau on an
// epoch metric, and an exponential moving average of the weights. Each keeps its state in the
// Trainer's checkpoints, so a resumed run decides as the uninterrupted one would.
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"
#include "train/callback.h"

namespace kiln::train {

/// The epoch metric a callback watches: losses improve downwards, accuracy upwards.
enum class Monitor { train_loss, val_loss, val_accuracy };

struct EarlyStoppingOptions {
  Monitor monitor = Monitor::val_loss;
  /// Epochs without improvement after which training stops.
  int64_t patience = 3;
  /// An improvement must beat the best value by more than this.
  double min_delta = 0;
};

/// Stops training when the monitored metric has not improved for `patience` epochs in a row
/// (PyTorch Lightning's EarlyStopping: improvement when value < best - min_delta for a loss).
class EarlyStopping : public Callback {
 public:
  explicit EarlyStopping(EarlyStoppingOptions options = {});
  /// One epoch's value; true when training should stop now.
  bool update(double value);
  double best() const { return best_; }
  int64_t wait_count() const { return wait_; }

  void on_epoch_end(Trainer& trainer, const EpochMetrics& metrics) override;
  void save_state(const std::string& path, TrainingState& state, int rank) override;
  void load_state(const std::string& path, const TrainingState& state) override;

 private:
  EarlyStoppingOptions options_;
  double best_;
  int64_t wait_ = 0;
};

struct ReduceLROnPlateauOptions {
  Monitor monitor = Monitor::val_loss;
  double factor = 0.1;  // new lr = max(lr * factor, min_lr)
  int64_t patience = 10;
  double min_lr = 0;
  double threshold = 1e-4;  // relative: a loss improves when below best * (1 - threshold)
  int64_t cooldown = 0;
  double eps = 1e-8;  // changes of the lr smaller than this are skipped
};

/// Divides the learning rate when the monitored metric stops improving: PyTorch's
/// torch.optim.lr_scheduler.ReduceLROnPlateau (threshold_mode "rel"), stepped once per epoch
/// with the epoch's metric. Needs Schedule::constant (a cosine schedule would overwrite its lr).
class ReduceLROnPlateau : public Callback {
 public:
  explicit ReduceLROnPlateau(ReduceLROnPlateauOptions options = {});
  /// PyTorch's step(metrics) on `opt`'s parameter groups.
  void step(double metric, optim::Optimizer& opt);
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }

  void on_train_begin(Trainer& trainer) override;
  void on_epoch_end(Trainer& trainer, const EpochMetrics& metrics) override;
  void save_state(const std::string& path, TrainingState& state, int rank) override;
  void load_state(const std::string& path, const TrainingState& state) override;

 private:
  bool is_better(double a) const;

  ReduceLROnPlateauOptions options_;
  double best_;
  int64_t num_bad_epochs_ = 0, cooldown_counter_ = 0;
};

/// An exponential moving average of the model's state (parameters and floating buffers, kept in
/// f32; integer buffers copied): after every optimizer step
///   ema = decay * ema + (1 - decay) * weights,
/// starting from the weights at the start of training. The average is swapped into the model for
/// each validation (and swapped back after), saved beside the Trainer's checkpoint
/// (`<checkpoint>.ema`, written by rank 0 before the checkpoint itself) and restored on resume.
class EMA : public Callback {
 public:
  explicit EMA(double decay = 0.999);
  /// The averaged state by state_dict name (empty before training starts).
  const nn::StateDict& state_dict() const { return shadow_; }
  int64_t updates() const { return updates_; }
  /// Copies the average into `model` (same state_dict names): to evaluate or export it.
  void copy_to(nn::Module& model) const;
  /// Writes the average as a safetensors file that `model.load_state_dict(nn::load_safetensors(path).tensors)`
  /// reads.
  void save(const std::string& path) const;

  void on_train_begin(Trainer& trainer) override;
  void on_step_end(Trainer& trainer, const StepMetrics& step) override;
  void on_validation_begin(Trainer& trainer) override;
  void on_validation_end(Trainer& trainer) override;
  void save_state(const std::string& path, TrainingState& state, int rank) override;
  void load_state(const std::string& path, const TrainingState& state) override;

  /// Where the average of the checkpoint at `checkpoint` is kept.
  static std::string file_for(const std::string& checkpoint) { return checkpoint + ".ema"; }

 private:
  void update(const nn::Module& model);

  double decay_;
  nn::StateDict shadow_;
  nn::StateDict backup_;  // the live weights while the average is swapped in
  int64_t updates_ = 0;
};

}  // namespace kiln::train
