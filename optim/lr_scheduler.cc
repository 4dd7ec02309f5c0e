// Closed-form learning-rate schedules and their chaining; see lr_scheduler.h.
#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace kiln::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (ParamGroup& g : optimizer_.param_groups()) {
    auto [it, inserted] = g.options.emplace("initial_lr", g.get("lr"));
    base_lrs_.push_back(it->second);
  }
}

void LRScheduler::initialize() {
  last_epoch_ = 0;
  apply();
}

void LRScheduler::step() {
  ++last_epoch_;
  apply();
}

void LRScheduler::apply() {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  KILN_CHECK(groups.size() == base_lrs_.size(),
             "LRScheduler.step: the optimizer has {} parameter groups but the schedule was built for {} (build the "
             "schedule after adding every group)",
             groups.size(), base_lrs_.size());
  last_lrs_.resize(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    last_lrs_[g] = lr_at(last_epoch_, base_lrs_[g]);
    groups[g].options["lr"] = last_lrs_[g];
  }
}

StateDict LRScheduler::state_dict() const {
  return {{"last_epoch", scalar_tensor(static_cast<double>(last_epoch_), kFloat64)},
          {"base_lrs", tensor<double>(base_lrs_, {static_cast<int64_t>(base_lrs_.size())})}};
}

void LRScheduler::load_state_dict(const StateDict& state) {
  for (const auto& [key, t] : state)
    KILN_CHECK(key == "last_epoch" || key == "base_lrs",
               "LRScheduler.load_state_dict: unexpected key '{}' (expected 'last_epoch' and 'base_lrs')", key);
  auto epoch = state.find("last_epoch");
  auto bases = state.find("base_lrs");
  KILN_CHECK(epoch != state.end(), "LRScheduler.load_state_dict: missing key 'last_epoch'");
  KILN_CHECK(bases != state.end(), "LRScheduler.load_state_dict: missing key 'base_lrs'");
  KILN_CHECK(epoch->second.defined() && epoch->second.numel() == 1,
             "LRScheduler.load_state_dict: 'last_epoch' should hold one value");
  KILN_CHECK(bases->second.defined() && bases->second.dim() == 1 &&
                 bases->second.numel() == static_cast<int64_t>(base_lrs_.size()),
             "LRScheduler.load_state_dict: 'base_lrs' should be 1-D with one lr per parameter group ({}), got shape {}",
             base_lrs_.size(), bases->second.defined() ? bases->second.sizes() : Shape{});
  const double e = epoch->second.item<double>();
  KILN_CHECK(e >= 0 && e == std::floor(e), "LRScheduler.load_state_dict: 'last_epoch' is {}, not a count", e);
  last_epoch_ = static_cast<int64_t>(e);
  base_lrs_ = bases->second.to_vector<double>();
  last_lrs_.resize(base_lrs_.size());
  for (size_t g = 0; g < base_lrs_.size(); ++g) last_lrs_[g] = lr_at(last_epoch_, base_lrs_[g]);
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  KILN_CHECK(step_size > 0, "StepLR: step_size must be positive, got {}", step_size);
  initialize();
}

double StepLR::lr_at(int64_t epoch, double base_lr) const {
  return base_lr * std::pow(gamma_, static_cast<double>(epoch / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  KILN_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be positive, got {}", T_max);
  initialize();
}

double CosineAnnealingLR::lr_at(int64_t epoch, double base_lr) const {
  const double c = std::cos(std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(t_max_));
  return eta_min_ + (base_lr - eta_min_) * (1 + c) / 2;
}

LinearWarmup::LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor)
    : LRScheduler(optimizer), warmup_steps_(warmup_steps), start_factor_(start_factor) {
  KILN_CHECK(warmup_steps > 0, "LinearWarmup: warmup_steps must be positive, got {}", warmup_steps);
  KILN_CHECK(start_factor > 0 && start_factor <= 1, "LinearWarmup: start_factor must be in (0, 1], got {}",
             start_factor);
  initialize();
}

double LinearWarmup::lr_at(int64_t epoch, double base_lr) const {
  const double done = static_cast<double>(std::min(epoch, warmup_steps_)) / static_cast<double>(warmup_steps_);
  return base_lr * (start_factor_ + (1 - start_factor_) * done);
}

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedules,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer), schedules_(std::move(schedules)), milestones_(std::move(milestones)) {
  KILN_CHECK(!schedules_.empty(), "SequentialLR: no schedules given");
  KILN_CHECK(milestones_.size() + 1 == schedules_.size(),
             "SequentialLR: {} schedules need {} milestones, got {}", schedules_.size(), schedules_.size() - 1,
             milestones_.size());
  for (size_t i = 0; i < schedules_.size(); ++i) {
    KILN_CHECK(schedules_[i] != nullptr, "SequentialLR: schedule {} is null", i);
    KILN_CHECK(&schedules_[i]->optimizer() == &optimizer,
               "SequentialLR: schedule {} was built on another optimizer", i);
  }
  for (size_t i = 0; i < milestones_.size(); ++i)
    KILN_CHECK(milestones_[i] > 0 && (i == 0 || milestones_[i] > milestones_[i - 1]),
               "SequentialLR: milestones must be positive and increasing, got {}", milestones_);
  initialize();
}

double SequentialLR::lr_at(int64_t epoch, double base_lr) const {
  size_t i = std::upper_bound(milestones_.begin(), milestones_.end(), epoch) - milestones_.begin();
  const int64_t start = i == 0 ? 0 : milestones_[i - 1];
  return schedules_[i]->lr_at(epoch - start, base_lr);
}

std::unique_ptr<SequentialLR> warmup_cosine(Optimizer& optimizer, int64_t warmup_steps, double start_factor,
                                            int64_t T_max, double eta_min) {
  auto warmup = std::make_shared<LinearWarmup>(optimizer, warmup_steps, start_factor);
  auto cosine = std::make_shared<CosineAnnealingLR>(optimizer, T_max, eta_min);
  return std::make_unique<SequentialLR>(optimizer, std::vector<std::shared_ptr<LRScheduler>>{warmup, cosine},
                                        std::vector<int64_t>{warmup_steps});
}

}  // namespace kiln::optim
