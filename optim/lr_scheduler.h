// Learning-rate schedules. Each is a closed-form function lr(epoch, base_lr) applied to every
// parameter group; step() advances the epoch and writes the new lr into the optimizer.
// Promise: the lr after k calls to step() is the closed form at epoch k (PyTorch's
// _get_closed_form_lr), so a schedule restored from its state_dict continues exactly.
//
// Warmup then cosine decay: build both schedules on the optimizer, then chain them with
// SequentialLR, which hands over at each milestone and restarts the next schedule at its epoch 0:
//
//   auto warmup = std::make_shared<LinearWarmup>(opt, /*warmup_steps=*/100, /*start_factor=*/0.01);
//   auto cosine = std::make_shared<CosineAnnealingLR>(opt, /*T_max=*/900, /*eta_min=*/1e-5);
//   SequentialLR sched(opt, {warmup, cosine}, /*milestones=*/{100});
//   for (...) { ...; opt.step(); sched.step(); }
//
// or, in one call: `auto sched = warmup_cosine(opt, 100, 0.01, 900, 1e-5);`.
// The base lr of each group is the lr it had when the first scheduler was built on the optimizer
// (recorded as the group option "initial_lr", as PyTorch does), so chained schedules agree on it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "optim/optimizer.h"

namespace kiln::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  /// Advances one epoch (or iteration) and sets every group's lr.
  void step();
  /// The lr this schedule set last, for the first group / for every group.
  double last_lr() const { return last_lrs_.front(); }
  const std::vector<double>& last_lrs() const { return last_lrs_; }
  /// How many times step() ran since construction (0 right after it, as PyTorch's last_epoch).
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  Optimizer& optimizer() const { return optimizer_; }

  /// The closed form: the lr at `epoch` for a group whose base lr is `base_lr`.
  virtual double lr_at(int64_t epoch, double base_lr) const = 0;

  /// "last_epoch" and "base_lrs" (0-dim and 1-D f64 tensors).
  StateDict state_dict() const;
  /// Restores last_epoch and base_lrs (the optimizer's lr comes back with the optimizer's own
  /// state_dict). Throws naming the missing key or the group-count mismatch; changes nothing
  /// then.
  void load_state_dict(const StateDict& state);

 protected:
  /// Records the base lrs ("initial_lr" of each group, set here when absent).
  explicit LRScheduler(Optimizer& optimizer);
  /// Applies epoch 0; every subclass constructor calls it last (virtual calls do not reach the
  /// subclass from the base constructor).
  void initialize();

 private:
  void apply();

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lrs_;
  int64_t last_epoch_ = 0;
};

/// lr = base_lr * gamma^floor(epoch / step_size).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

/// Linear ramp from start_factor * base_lr to base_lr over warmup_steps, then constant:
/// lr = base_lr * (start_factor + (1 - start_factor) * min(epoch, warmup_steps) / warmup_steps)
/// (PyTorch's LinearLR with end_factor 1 and total_iters = warmup_steps).
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor = 1.0 / 3);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  int64_t warmup_steps_;
  double start_factor_;
};

/// Runs schedules[i] from milestone i-1 (0 for the first) to milestone i, each restarted at its
/// own epoch 0: lr(epoch) = schedules[i].lr_at(epoch - milestones[i-1], base_lr). The children
/// are used only for their closed form; stepping them directly is not needed.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedules,
               std::vector<int64_t> milestones);
  double lr_at(int64_t epoch, double base_lr) const override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedules_;
  std::vector<int64_t> milestones_;
};

/// Linear warmup over warmup_steps from start_factor * lr, then cosine annealing to eta_min over
/// the next T_max steps.
std::unique_ptr<SequentialLR> warmup_cosine(Optimizer& optimizer, int64_t warmup_steps, double start_factor,
                                            int64_t T_max, double eta_min = 0);

}  // namespace kiln::optim
