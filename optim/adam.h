// Adam and AdamW: torch.optim.Adam / torch.optim.AdamW's update rules (bias correction, eps
// added outside the square root, optional AMSGrad). Contiguous f32/f64 CPU parameters are
// updated by one fused loop each; other parameters by tensor ops.
#pragma once

#include <optional>

#include "optim/optimizer.h"

namespace kiln::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  /// L2 penalty added to the gradient (Adam) or decoupled decay of the weights (AdamW). Left
  /// unset it is PyTorch's default: 0 for Adam, 1e-2 for AdamW.
  std::optional<double> weight_decay;
  bool amsgrad = false;
  bool maximize = false;

  AdamOptions(double lr_ = 1e-3) : lr(lr_) {}  // NOLINT: Adam(params, 3e-4) reads well
  AdamOptions& set_betas(double b1, double b2) { beta1 = b1; beta2 = b2; return *this; }
  AdamOptions& set_eps(double v) { eps = v; return *this; }
  AdamOptions& set_weight_decay(double v) { weight_decay = v; return *this; }
  AdamOptions& set_amsgrad(bool v = true) { amsgrad = v; return *this; }
  AdamOptions& set_maximize(bool v = true) { maximize = v; return *this; }
  /// As a group option map: "lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad", "maximize".
  Options to_map(double default_weight_decay) const;
};

/// For each parameter p with gradient g, at its step t = 1, 2, ...:
///   g = g + weight_decay * p                  (Adam)      p = p * (1 - lr * weight_decay)  (AdamW)
///   m = beta1 * m + (1 - beta1) * g           v = beta2 * v + (1 - beta2) * g * g
///   v_hat = amsgrad ? (v_max = max(v_max, v)) : v
///   p = p - lr / (1 - beta1^t) * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)
/// State: "step", "exp_avg", "exp_avg_sq", and "max_exp_avg_sq" with amsgrad.
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  Adam(std::vector<ParamGroup> groups, AdamOptions defaults = {});

  void step() override;

 protected:
  Adam(std::string name, std::vector<ParamGroup> groups, AdamOptions defaults, bool decoupled_weight_decay);

  std::vector<std::string> state_names() const override { return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}; }
  void check_options(const Options& options, int64_t group_index) const override;
  void check_param_state(int64_t index, const std::map<std::string, Tensor>& state,
                         const ParamGroup& group) const override;

 private:
  bool decoupled_;
};

/// Adam with decoupled weight decay (Loshchilov & Hutter): the weights shrink by
/// lr * weight_decay each step instead of the decay entering the moments. Default
/// weight_decay 1e-2.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamOptions options = {});
  AdamW(std::vector<ParamGroup> groups, AdamOptions defaults = {});
};

}  // namespace kiln::optim
