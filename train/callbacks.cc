// Early stopping, ReduceLROnPlateau and the EMA of the weights (train/callbacks.h).
#include "train/callbacks.h"

#include <cmath>
#include <filesystem>
#include <limits>

#include "nn/safetensors.h"

namespace kiln::train {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

const char* monitor_name(Monitor m) {
  switch (m) {
    case Monitor::train_loss: return "train_loss";
    case Monitor::val_loss: return "val_loss";
    default: return "val_accuracy";
  }
}

bool maximise(Monitor m) { return m == Monitor::val_accuracy; }

double monitored(const EpochMetrics& e, Monitor m, const char* who) {
  std::optional<double> v = m == Monitor::train_loss ? std::optional<double>(e.train_loss)
                            : m == Monitor::val_loss ? e.val_loss
                                                     : e.val_accuracy;
  KILN_CHECK(v.has_value(), "{}: monitors {}, which epoch {} did not produce (give fit() a validation loader)", who,
             monitor_name(m), e.epoch + 1);
  return *v;
}

/// Doubles and integers in checkpoint metadata, written so they read back exactly.
std::string exact(double v) { return fmt::format("{:.17g}", v); }
double read_double(const TrainingState& s, const std::string& key) {
  auto it = s.extra.find(key);
  KILN_CHECK(it != s.extra.end(), "resume: the checkpoint has no '{}' (saved without this callback?)", key);
  return std::stod(it->second);
}

}  // namespace

// ---- EarlyStopping

EarlyStopping::EarlyStopping(EarlyStoppingOptions options)
    : options_(options), best_(maximise(options.monitor) ? -kInf : kInf) {
  KILN_CHECK(options_.patience >= 1, "EarlyStopping: patience must be >= 1, got {}", options_.patience);
  KILN_CHECK(std::isfinite(options_.min_delta) && options_.min_delta >= 0,
             "EarlyStopping: min_delta must be finite and >= 0, got {}", options_.min_delta);
}

bool EarlyStopping::update(double value) {
  const bool improved = maximise(options_.monitor) ? value > best_ + options_.min_delta : value < best_ - options_.min_delta;
  if (improved) {
    best_ = value;
    wait_ = 0;
    return false;
  }
  return ++wait_ >= options_.patience;
}

void EarlyStopping::on_epoch_end(Trainer& trainer, const EpochMetrics& metrics) {
  if (update(monitored(metrics, options_.monitor, "EarlyStopping"))) trainer.request_stop();
}

void EarlyStopping::save_state(const std::string&, TrainingState& state, int) {
  state.extra["early_stopping.best"] = exact(best_);
  state.extra["early_stopping.wait"] = std::to_string(wait_);
}

void EarlyStopping::load_state(const std::string&, const TrainingState& state) {
  const double best = read_double(state, "early_stopping.best");
  wait_ = static_cast<int64_t>(read_double(state, "early_stopping.wait"));
  best_ = best;
}

// ---- ReduceLROnPlateau

ReduceLROnPlateau::ReduceLROnPlateau(ReduceLROnPlateauOptions options)
    : options_(options), best_(maximise(options.monitor) ? -kInf : kInf) {
  KILN_CHECK(options_.factor > 0 && options_.factor < 1, "ReduceLROnPlateau: factor must be in (0, 1), got {}",
             options_.factor);
  KILN_CHECK(options_.patience >= 0, "ReduceLROnPlateau: patience must be >= 0, got {}", options_.patience);
  KILN_CHECK(options_.min_lr >= 0, "ReduceLROnPlateau: min_lr must be >= 0, got {}", options_.min_lr);
  KILN_CHECK(options_.threshold >= 0 && options_.cooldown >= 0 && options_.eps >= 0,
             "ReduceLROnPlateau: threshold ({}), cooldown ({}) and eps ({}) must be >= 0", options_.threshold,
             options_.cooldown, options_.eps);
}

bool ReduceLROnPlateau::is_better(double a) const {
  return maximise(options_.monitor) ? a > best_ * (1 + options_.threshold) : a < best_ * (1 - options_.threshold);
}

void ReduceLROnPlateau::step(double metric, optim::Optimizer& opt) {
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad epochs in cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience) {
    for (optim::ParamGroup& g : opt.param_groups()) {
      const double old_lr = g.get("lr"), new_lr = std::max(old_lr * options_.factor, options_.min_lr);
      if (old_lr - new_lr > options_.eps) g.options["lr"] = new_lr;
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
}

void ReduceLROnPlateau::on_train_begin(Trainer& trainer) {
  KILN_CHECK(trainer.options().schedule == Schedule::constant,
             "ReduceLROnPlateau: needs Schedule::constant (the cosine schedule sets the lr every step)");
}

void ReduceLROnPlateau::on_epoch_end(Trainer& trainer, const EpochMetrics& metrics) {
  step(monitored(metrics, options_.monitor, "ReduceLROnPlateau"), trainer.optimizer());
}

void ReduceLROnPlateau::save_state(const std::string&, TrainingState& state, int) {
  state.extra["reduce_lr_on_plateau.best"] = exact(best_);
  state.extra["reduce_lr_on_plateau.num_bad_epochs"] = std::to_string(num_bad_epochs_);
  state.extra["reduce_lr_on_plateau.cooldown_counter"] = std::to_string(cooldown_counter_);
}

void ReduceLROnPlateau::load_state(const std::string&, const TrainingState& state) {
  const double best = read_double(state, "reduce_lr_on_plateau.best");
  const auto bad = static_cast<int64_t>(read_double(state, "reduce_lr_on_plateau.num_bad_epochs"));
  cooldown_counter_ = static_cast<int64_t>(read_double(state, "reduce_lr_on_plateau.cooldown_counter"));
  best_ = best;
  num_bad_epochs_ = bad;
}

// ---- EMA

EMA::EMA(double decay) : decay_(decay) {
  KILN_CHECK(decay > 0 && decay < 1, "EMA: decay must be in (0, 1), got {}", decay);
}

void EMA::on_train_begin(Trainer& trainer) {
  NoGradGuard no_grad;
  const nn::StateDict live = trainer.model().state_dict();
  if (!shadow_.empty()) {  // restored by load_state: check it fits, and move it to the model's devices
    for (const auto& [name, t] : live)
      KILN_CHECK(shadow_.count(name) && shadow_.at(name).shape() == t.shape(),
                 "EMA: the saved average does not match the model at '{}'", name);
    KILN_CHECK(shadow_.size() == live.size(), "EMA: the saved average has {} tensors, the model {}", shadow_.size(),
               live.size());
    for (auto& [name, s] : shadow_) s = s.to(live.at(name).device());
    return;
  }
  for (const auto& [name, t] : live) shadow_[name] = t.is_floating_point() ? t.to(kFloat32).clone() : t.clone();
}

void EMA::update(const nn::Module& model) {
  NoGradGuard no_grad;
  for (const auto& [name, t] : model.state_dict()) {
    Tensor& s = shadow_.at(name);
    if (!t.is_floating_point()) {
      s.copy_(t);
      continue;
    }
    s.mul_(decay_);
    s.add_(t.to(kFloat32), 1 - decay_);
  }
  ++updates_;
}

void EMA::on_step_end(Trainer& trainer, const StepMetrics&) { update(trainer.model()); }

namespace {

/// Copies `from` into the model's tensors of the same names (converting dtypes: the average is
/// f32 where an O2 model is 16-bit).
void copy_into(nn::Module& model, const nn::StateDict& from) {
  NoGradGuard no_grad;
  nn::StateDict live = model.state_dict();
  KILN_CHECK(live.size() == from.size(), "EMA: {} averaged tensors for a model with {}", from.size(), live.size());
  for (auto& [name, t] : live) {
    auto it = from.find(name);
    KILN_CHECK(it != from.end() && it->second.shape() == t.shape(), "EMA: no averaged tensor fits the model's '{}'",
               name);
    t.copy_(it->second);
  }
}

}  // namespace

void EMA::copy_to(nn::Module& model) const {
  KILN_CHECK(!shadow_.empty(), "EMA: no average yet (training has not started)");
  copy_into(model, shadow_);
}

void EMA::on_validation_begin(Trainer& trainer) {
  NoGradGuard no_grad;
  backup_.clear();
  for (const auto& [name, t] : trainer.model().state_dict()) backup_[name] = t.clone();
  copy_to(trainer.model());
}

void EMA::on_validation_end(Trainer& trainer) {
  copy_into(trainer.model(), backup_);
  backup_.clear();
}

void EMA::save(const std::string& path) const {
  KILN_CHECK(!shadow_.empty(), "EMA: no average yet (training has not started)");
  nn::save_safetensors(path, shadow_, {{"ema.decay", exact(decay_)}, {"ema.updates", std::to_string(updates_)}});
}

void EMA::save_state(const std::string& path, TrainingState& state, int rank) {
  if (rank == 0) save(file_for(path));
  state.extra["ema.updates"] = std::to_string(updates_);
}

void EMA::load_state(const std::string& path, const TrainingState& state) {
  const auto updates = static_cast<int64_t>(read_double(state, "ema.updates"));
  const std::string file = file_for(path);
  KILN_CHECK(std::filesystem::exists(file), "EMA: resuming {} needs its average {}, which is missing", path, file);
  nn::SafetensorsContents c = nn::load_safetensors(file);
  KILN_CHECK(c.metadata.count("ema.updates") && c.metadata.at("ema.updates") == std::to_string(updates),
             "EMA: {} is not the average of checkpoint {} (updates {} there, {} in the checkpoint)", file, path,
             c.metadata.count("ema.updates") ? c.metadata.at("ema.updates") : "?", updates);
  shadow_ = std::move(c.tensors);
  updates_ = updates;
}

}  // namespace kiln::train
