// train/fit_parts.h: the schedule's closed form, the parameter groups, a step-only checkpoint's
// position.
#include "train/fit_parts.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace kiln::train {

double scheduled_lr(const FitOptions& o, int64_t step, int64_t total_steps) {
  switch (o.schedule) {
    case Schedule::constant:
      return o.lr;
    case Schedule::cosine: {  // optim::CosineAnnealingLR's form, eta_min 0
      const double c = std::cos(M_PI * static_cast<double>(step) / static_cast<double>(std::max<int64_t>(total_steps, 1)));
      return o.lr * (1 + c) / 2;
    }
    case Schedule::warmup_cosine: {
      if (step < o.warmup_steps) return o.lr * static_cast<double>(step + 1) / static_cast<double>(o.warmup_steps);
      if (step >= total_steps) return o.min_lr;
      const double progress = static_cast<double>(step - o.warmup_steps) /
                              static_cast<double>(std::max<int64_t>(total_steps - o.warmup_steps, 1));
      return o.min_lr + 0.5 * (1.0 + std::cos(M_PI * progress)) * (o.lr - o.min_lr);
    }
  }
  fail("Trainer: unknown schedule {}", static_cast<int>(o.schedule));
}

void check_schedule_options(const FitOptions& o) {
  KILN_CHECK(o.warmup_steps >= 0, "Trainer: warmup_steps must be >= 0, got {}", o.warmup_steps);
  KILN_CHECK(std::isfinite(o.min_lr) && o.min_lr >= 0 && o.min_lr <= o.lr,
             "Trainer: min_lr must be finite and in [0, lr = {}], got {}", o.lr, o.min_lr);
  KILN_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1,
             "Trainer: the betas must be in [0, 1), got beta1 {} and beta2 {}", o.beta1, o.beta2);
  KILN_CHECK(std::isfinite(o.loss_scale) && o.loss_scale > 0, "Trainer: loss_scale must be finite and > 0, got {}",
             o.loss_scale);
}

std::vector<optim::ParamGroup> fit_param_groups(const FitOptions& o, const nn::Module& model) {
  if (!o.decay) return {optim::ParamGroup(model.parameters())};
  std::vector<Tensor> decayed, not_decayed;
  for (const auto& [name, p] : model.named_parameters()) (o.decay(name, p) ? decayed : not_decayed).push_back(p);
  return {optim::ParamGroup(std::move(decayed)), optim::ParamGroup(std::move(not_decayed), {{"weight_decay", 0.0}})};
}

void position_from_step(TrainingState& state, int64_t steps_per_epoch, int64_t grad_accum) {
  if (state.epoch != 0 || state.batch != 0 || state.step == 0) return;
  state.epoch = state.step / steps_per_epoch;
  state.batch = (state.step % steps_per_epoch) * grad_accum;
}

}  // namespace kiln::train
