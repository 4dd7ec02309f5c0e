// amp::GradScaler: dynamic loss scaling, as torch.amp.GradScaler. f16 gradients of small losses
// underflow to zero; multiplying the loss by a large scale before backward keeps them
// representable, and dividing the gradients by it before the step restores their values. The
// scale starts at 2^16, halves (and the step is skipped) whenever a gradient holds an inf or NaN,
// and doubles after 2000 clean iterations in a row. bf16 has f32's range and rarely needs it.
//
// One iteration:
//   Tensor loss;
//   { amp::AutocastGuard autocast(kFloat16); loss = loss_fn(model.forward(x), y); }
//   opt.zero_grad();
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);                                  // optional: only to clip, or to
//   optim::clip_grad_norm_(model.parameters(), 1.0);       //   look at the true gradients
//   scaler.step(opt);                                      // skipped on inf/NaN
//   scaler.update();
//
// Data parallel: every rank must take the same decision, or their weights drift apart. Set a
// found-inf reducer (set_found_inf_reducer) that all-reduces the flag with max across ranks;
// the DDP layer does this. unscale_ (and step, when it unscales) calls it once per optimizer and
// iteration, in the same order on every rank, so it is a collective.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "optim/optimizer.h"

namespace kiln::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int64_t growth_interval = 2000;
  /// Disabled, the scaler is a pass-through: scale(loss) is the loss and step() always steps.
  bool enabled = true;
};

class GradScaler {
 public:
  /// Throws naming the option on an invalid value.
  explicit GradScaler(GradScalerOptions options = {});

  /// loss * scale(), in f32 (an f16/bf16 loss is widened first so the product cannot overflow
  /// the 16-bit range). Call backward() on the result.
  Tensor scale(const Tensor& loss) const;

  /// Divides the gradients of `opt`'s parameters by the scale, in place, and records whether any
  /// holds an inf or NaN. Gradients of f16/bf16 parameters are widened to f32 first (the
  /// parameter's .grad becomes f32), so small unscaled values are not flushed to zero; the
  /// optimizer converts them back, or uses them as is for its master weights. Call it before
  /// clipping. Throws if already called for `opt` since the last update(), or after step(opt).
  void unscale_(optim::Optimizer& opt);

  /// unscale_(opt) unless already done this iteration, then opt.step() unless an inf/NaN was
  /// found (a skipped step, counted by skipped_steps()). Returns whether it stepped. Throws if
  /// called twice for `opt` between update()s.
  bool step(optim::Optimizer& opt);

  /// Ends the iteration: the scale is multiplied by backoff_factor if any step() of this
  /// iteration found an inf/NaN, by growth_factor after growth_interval clean iterations in a
  /// row. Throws if no step()/unscale_() ran since the last update().
  void update();

  /// The current scale (1 when disabled).
  double scale() const { return enabled_ ? scale_ : 1.0; }
  /// Steps skipped because of inf/NaN gradients since construction (restored from checkpoints).
  int64_t skipped_steps() const { return skipped_steps_; }
  /// Clean iterations since the scale last changed.
  int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return enabled_; }
  const GradScalerOptions& options() const { return options_; }

  /// The found-inf reducer for data parallel: called with the iteration's found_inf flag (a
  /// one-element f32 tensor on the device of the first gradient, 1 if this rank saw an inf/NaN,
  /// else 0) before it is read. It must replace the value in place by the maximum over all ranks
  /// (an all-reduce with max). Unset (the default), each process decides on its own.
  using FoundInfReducer = std::function<void(Tensor& found_inf)>;
  void set_found_inf_reducer(FoundInfReducer reducer) { reducer_ = std::move(reducer); }

  /// "scale", "growth_factor", "backoff_factor", "growth_interval", "growth_tracker",
  /// "skipped_steps".
  std::map<std::string, double> state_dict() const;
  /// Restores a state_dict: every key present, values valid; nothing changes otherwise.
  void load_state_dict(const std::map<std::string, double>& state);
  /// The state_dict as checkpoint metadata (train::TrainingState::extra), under "grad_scaler.<key>",
  /// written so that every value reads back exactly.
  void save_to(std::map<std::string, std::string>& extra) const;
  /// Restores what save_to wrote; throws naming the key if it is missing or not a number.
  void load_from(const std::map<std::string, std::string>& extra);

 private:
  enum class Stage { ready, unscaled, stepped };
  struct PerOptimizer {
    Stage stage = Stage::ready;
    bool found_inf = false;
  };

  GradScalerOptions options_;
  bool enabled_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_steps_ = 0;
  FoundInfReducer reducer_;
  std::map<const optim::Optimizer*, PerOptimizer> per_optimizer_;  // this iteration's
};

}  // namespace kiln::amp
