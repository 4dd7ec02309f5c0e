#include "train/mixed_precision.h"

#include <cmath>

namespace kiln::train {
namespace {

constexpr const char* kAmpKey = "amp";

amp::GradScalerOptions scaler_options(bool f16, double init_scale) {
  amp::GradScalerOptions o;
  o.enabled = f16;
  o.init_scale = init_scale;
  return o;
}

}  // namespace

MixedPrecision::MixedPrecision(const std::string& amp, const std::string& mode, double init_scale)
    : enabled_(amp != "none"),
      o2_(mode == "o2"),
      dtype_(amp == "f16" ? kFloat16 : kBFloat16),
      scaler_(scaler_options(amp == "f16", init_scale)) {
  KILN_CHECK(amp == "none" || amp == "f16" || amp == "bf16", "amp: must be one of none|f16|bf16, got '{}'", amp);
  KILN_CHECK(mode == "o1" || mode == "o2", "amp mode: must be one of o1|o2, got '{}'", mode);
  KILN_CHECK(enabled_ || !o2_, "amp mode: o2 (a 16-bit model with f32 master weights) needs amp f16 or bf16");
  KILN_CHECK(init_scale > 0 && std::isfinite(init_scale), "loss scale: must be a positive finite number, got {}",
             init_scale);
}

namespace {

const char* amp_name(Precision p) {
  switch (p) {
    case Precision::f16: return "f16";
    case Precision::bf16: return "bf16";
    default: return "none";
  }
}

}  // namespace

MixedPrecision::MixedPrecision(Precision precision, AmpMode mode, double init_scale)
    : MixedPrecision(amp_name(precision), mode == AmpMode::o2 ? "o2" : "o1", init_scale) {}

std::string MixedPrecision::describe() const {
  if (!enabled_) return "none";
  return fmt::format("{}/{}", dtype_, o2_ ? "o2" : "o1");
}

void MixedPrecision::prepare_model(nn::Module& model) const {
  if (o2_) model.to(dtype_);
}

void MixedPrecision::prepare_optimizer(optim::Optimizer& opt) const {
  if (o2_) opt.set_master_weights();
}

void MixedPrecision::backward(const Tensor& loss) const { scaler_.scale(loss).backward(); }

bool MixedPrecision::step(optim::Optimizer& opt) {
  const bool stepped = scaler_.step(opt);
  scaler_.update();
  return stepped;
}

void MixedPrecision::save(train::TrainingState& state) const {
  state.extra[kAmpKey] = describe();
  if (scaler_.is_enabled()) scaler_.save_to(state.extra);
}

void MixedPrecision::load(const train::TrainingState& state) {
  auto it = state.extra.find(kAmpKey);
  const std::string saved = it == state.extra.end() ? "none" : it->second;  // older checkpoints: f32
  KILN_CHECK(saved == describe(), "resume: the checkpoint was trained with mixed precision '{}' but this run uses '{}'",
             saved, describe());
  if (scaler_.is_enabled()) scaler_.load_from(state.extra);
}

}  // namespace kiln::train
