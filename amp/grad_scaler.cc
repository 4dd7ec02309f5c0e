// GradScaler: per-optimizer bookkeeping of one iteration (ready -> unscaled -> stepped), the
// unscale pass through core's fused kernel (with a generic fallback for backends without it),
// and the scale update rule of torch.amp.GradScaler.
#include "amp/grad_scaler.h"

#include <charconv>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "core/grad_mode.h"
#include "core/kernels.h"
#include "core/ops.h"

namespace kiln::amp {
namespace {

constexpr const char* kExtraPrefix = "grad_scaler.";
const char* const kKeys[] = {"scale", "growth_factor", "backoff_factor", "growth_interval", "growth_tracker",
                             "skipped_steps"};

void check_options(const GradScalerOptions& o, const char* who) {
  KILN_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0, "{}: scale must be positive and finite, got {}", who,
             o.init_scale);
  KILN_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1, "{}: growth_factor must be > 1, got {}", who,
             o.growth_factor);
  KILN_CHECK(o.backoff_factor > 0 && o.backoff_factor < 1, "{}: backoff_factor must be in (0, 1), got {}", who,
             o.backoff_factor);
  KILN_CHECK(o.growth_interval > 0, "{}: growth_interval must be positive, got {}", who, o.growth_interval);
}

/// grad *= inv_scale, and found_inf = 1 if grad holds an inf/NaN: the device's fused kernel, or
/// generic ops where the backend registered none (x * 0 is NaN exactly for inf and NaN).
void unscale_one(Tensor& grad, Tensor& found_inf, double inv_scale) {
  KILN_CHECK(is_floating(grad.dtype()), "GradScaler.unscale_: a gradient has dtype {} (floating types only)",
             grad.dtype());
  if (kernels::non_finite_check_and_unscale.has(grad.device().type)) {
    kernels::non_finite_check_and_unscale[grad.device()](grad, found_inf, inv_scale);
    return;
  }
  Tensor probe = (grad * 0.0).sum();
  found_inf.copy_(maximum(found_inf, (probe != probe).to(kFloat32).to(found_inf.device())));
  grad.mul_(inv_scale);
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options)
    : options_(options), enabled_(options.enabled), scale_(options.init_scale) {
  check_options(options_, "GradScaler");
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!enabled_) return loss;
  KILN_CHECK(loss.defined() && loss.is_floating_point(), "GradScaler.scale: the loss must be a floating tensor{}",
             loss.defined() ? fmt::format(", got dtype {}", loss.dtype()) : std::string(", got an undefined one"));
  const Tensor wide = loss.dtype() == kFloat16 || loss.dtype() == kBFloat16 ? loss.to(kFloat32) : loss;
  return wide * scale_;
}

void GradScaler::unscale_(optim::Optimizer& opt) {
  if (!enabled_) return;
  PerOptimizer& st = per_optimizer_[&opt];
  KILN_CHECK(st.stage != Stage::unscaled,
             "GradScaler.unscale_: already called for this optimizer ({}) since the last update()", opt.name());
  KILN_CHECK(st.stage != Stage::stepped,
             "GradScaler.unscale_: called after step() for this optimizer ({}); call update() first", opt.name());
  NoGradGuard no_grad;
  // f32 reciprocal, as PyTorch: exact for the power-of-two scales the update rule produces.
  const double inv_scale = static_cast<double>(1.0f / static_cast<float>(scale_));
  std::vector<Tensor> found;  // one flag per device the gradients live on
  for (optim::ParamGroup& group : opt.param_groups()) {
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      if (g.dtype() == kFloat16 || g.dtype() == kBFloat16 || !g.is_contiguous()) {
        g = g.dtype() == kFloat16 || g.dtype() == kBFloat16 ? g.to(kFloat32) : g.contiguous();
        p.set_grad(g);
      }
      Tensor* flag = nullptr;
      for (Tensor& f : found)
        if (f.device() == g.device()) flag = &f;
      if (!flag) flag = &found.emplace_back(zeros({}, TensorOptions(kFloat32).device(g.device())));
      unscale_one(g, *flag, inv_scale);
    }
  }
  Tensor found_inf = found.empty() ? zeros({}, kFloat32) : found[0];
  for (size_t i = 1; i < found.size(); ++i) found_inf = maximum(found_inf, found[i].to(found_inf.device()));
  if (reducer_) reducer_(found_inf);
  KILN_CHECK(found_inf.defined() && found_inf.numel() == 1,
             "GradScaler.unscale_: the found-inf reducer left found_inf {}", found_inf.defined() ? "with " +
             std::to_string(found_inf.numel()) + " elements (want 1)" : std::string("undefined"));
  st.found_inf = found_inf.item<double>() != 0;
  st.stage = Stage::unscaled;
}

bool GradScaler::step(optim::Optimizer& opt) {
  if (!enabled_) {
    opt.step();
    return true;
  }
  PerOptimizer& st = per_optimizer_[&opt];
  KILN_CHECK(st.stage != Stage::stepped,
             "GradScaler.step: already called for this optimizer ({}) since the last update()", opt.name());
  if (st.stage == Stage::ready) unscale_(opt);
  st.stage = Stage::stepped;
  if (st.found_inf) {
    ++skipped_steps_;
    return false;
  }
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!enabled_) return;
  KILN_CHECK(!per_optimizer_.empty(),
             "GradScaler.update: no inf/NaN check was recorded this iteration (call step(optimizer) first)");
  bool found_inf = false;
  for (const auto& [opt, st] : per_optimizer_) found_inf |= st.found_inf;
  per_optimizer_.clear();
  if (found_inf) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    return;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    const double grown = scale_ * options_.growth_factor;
    // A scale past f32's range would make every scaled loss inf: stay below it.
    if (std::isfinite(static_cast<float>(grown))) scale_ = grown;
    growth_tracker_ = 0;
  }
}

std::map<std::string, double> GradScaler::state_dict() const {
  return {{"scale", scale_},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", static_cast<double>(options_.growth_interval)},
          {"growth_tracker", static_cast<double>(growth_tracker_)},
          {"skipped_steps", static_cast<double>(skipped_steps_)}};
}

void GradScaler::load_state_dict(const std::map<std::string, double>& state) {
  for (const char* key : kKeys)
    KILN_CHECK(state.count(key), "GradScaler.load_state_dict: missing key '{}'", key);
  KILN_CHECK(state.size() == std::size(kKeys), "GradScaler.load_state_dict: unexpected keys (expected exactly {})",
             fmt::join(kKeys, ", "));
  auto whole = [&](const char* key) {
    const double v = state.at(key);
    KILN_CHECK(v >= 0 && v == std::floor(v) && v < 9.0e15,
               "GradScaler.load_state_dict: '{}' must be a non-negative integer, got {}", key, v);
    return static_cast<int64_t>(v);
  };
  GradScalerOptions o = options_;
  o.init_scale = state.at("scale");
  o.growth_factor = state.at("growth_factor");
  o.backoff_factor = state.at("backoff_factor");
  o.growth_interval = whole("growth_interval");
  check_options(o, "GradScaler.load_state_dict");
  const int64_t tracker = whole("growth_tracker"), skipped = whole("skipped_steps");
  KILN_CHECK(tracker < o.growth_interval,
             "GradScaler.load_state_dict: growth_tracker {} must be below growth_interval {}", tracker,
             o.growth_interval);
  options_.growth_factor = o.growth_factor;
  options_.backoff_factor = o.backoff_factor;
  options_.growth_interval = o.growth_interval;
  scale_ = o.init_scale;
  growth_tracker_ = tracker;
  skipped_steps_ = skipped;
  per_optimizer_.clear();
}

void GradScaler::save_to(std::map<std::string, std::string>& extra) const {
  // fmt's shortest round-trip form: from_chars reads back the same double.
  for (const auto& [key, value] : state_dict()) extra[kExtraPrefix + key] = fmt::format("{}", value);
}

void GradScaler::load_from(const std::map<std::string, std::string>& extra) {
  std::map<std::string, double> state;
  for (const char* key : kKeys) {
    const std::string full = std::string(kExtraPrefix) + key;
    auto it = extra.find(full);
    KILN_CHECK(it != extra.end(), "GradScaler.load_from: no '{}' in the checkpoint metadata (was it saved with a "
               "GradScaler?)", full);
    const std::string& s = it->second;
    double v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    KILN_CHECK(ec == std::errc() && end == s.data() + s.size() && !s.empty(),
               "GradScaler.load_from: '{}' is '{}', not a number", full, s);
    state[key] = v;
  }
  load_state_dict(state);
}

}  // namespace kiln::amp
