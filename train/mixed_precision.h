// The main job's mixed precision (--amp none|f16|bf16, --amp-mode o1|o2) in one object, so the
// training loop only says where the forward pass, backward and the step happen:
//   o1: the f32 model runs its forward pass under amp::AutocastGuard;
//   o2: the model itself is converted to f16/bf16 and the optimizer keeps f32 master weights
//       (the forward pass still runs under the guard, for the f32-class ops);
//   f16 adds an amp::GradScaler (dynamic loss scaling); bf16 has f32's range and needs none.
#pragma once

#include <cstdint>
#include <string>

#include "amp/amp.h"
#include "train/checkpoint.h"

namespace kiln::train {

/// The dtype of the mixed-precision ops: f16 adds dynamic loss scaling (amp::GradScaler); bf16
/// needs none.
enum class Precision { f32, f16, bf16 };
/// o1: the f32 model under autocast; o2: the model itself in 16 bits, f32 master weights in the
/// optimizer.
enum class AmpMode { o1, o2 };

class MixedPrecision {
 public:
  /// The typed form of the constructor below (o2 needs f16 or bf16).
  MixedPrecision(Precision precision, AmpMode mode, double init_scale = amp::GradScalerOptions{}.init_scale);
  /// `amp`: "none", "f16" or "bf16"; `mode`: "o1" or "o2" (only with f16/bf16); `init_scale`:
  /// the f16 loss scaler's first scale. Throws naming the setting and the bad value.
  MixedPrecision(const std::string& amp, const std::string& mode,
                 double init_scale = amp::GradScalerOptions{}.init_scale);

  bool enabled() const { return enabled_; }
  /// "none", or "bf16/o1" etc.: what checkpoints record.
  std::string describe() const;

  /// o2: the model's floating parameters and buffers to the lower dtype.
  void prepare_model(nn::Module& model) const;
  /// o2: f32 master weights in the optimizer.
  void prepare_optimizer(optim::Optimizer& opt) const;

  /// The guard for one forward pass (autocast off when mixed precision is).
  amp::AutocastGuard autocast() const { return amp::AutocastGuard(dtype_, enabled_); }
  /// backward() of the loss, scaled when a GradScaler is in use.
  void backward(const Tensor& loss) const;
  /// The optimizer step through the scaler (skipped on inf/NaN gradients); returns whether it
  /// stepped.
  bool step(optim::Optimizer& opt);

  /// The loss scaler (disabled unless f16). Data parallel sets its found-inf reducer.
  amp::GradScaler& scaler() { return scaler_; }
  int64_t skipped_steps() const { return scaler_.skipped_steps(); }

  /// Records the setting (and the scaler's state) in the checkpoint metadata.
  void save(train::TrainingState& state) const;
  /// Restores the scaler; refuses a checkpoint made with another setting, naming both.
  void load(const train::TrainingState& state);

 private:
  bool enabled_ = false;
  bool o2_ = false;
  DType dtype_ = kBFloat16;
  amp::GradScaler scaler_;
};

}  // namespace kiln::train
