// SGD with momentum, dampening, Nesterov momentum and L2 weight decay: torch.optim.SGD's update
// rule, step for step. Contiguous f32/f64 CPU parameters are updated by one fused loop each.
#pragma once

#include "optim/optimizer.h"

namespace kiln::optim {

/// SGD's options with PyTorch's defaults (lr 1e-3).
struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool maximize = false;

  SGDOptions(double lr_ = 1e-3) : lr(lr_) {}  // NOLINT: SGD(params, 0.1) reads well
  SGDOptions& set_momentum(double v) { momentum = v; return *this; }
  SGDOptions& set_dampening(double v) { dampening = v; return *this; }
  SGDOptions& set_weight_decay(double v) { weight_decay = v; return *this; }
  SGDOptions& set_nesterov(bool v = true) { nesterov = v; return *this; }
  SGDOptions& set_maximize(bool v = true) { maximize = v; return *this; }
  /// As a group option map: "lr", "momentum", "dampening", "weight_decay", "nesterov",
  /// "maximize".
  Options to_map() const;
};

/// For each parameter p with gradient g (PyTorch's torch.optim.SGD):
///   g = g + weight_decay * p
///   b = g on the first step, else momentum * b + (1 - dampening) * g   (when momentum != 0)
///   g = nesterov ? g + momentum * b : b
///   p = p - lr * g
/// State: "momentum_buffer" (when momentum != 0).
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  SGD(std::vector<ParamGroup> groups, SGDOptions defaults = {});

  void step() override;

 protected:
  std::vector<std::string> state_names() const override { return {"momentum_buffer"}; }
  void check_options(const Options& options, int64_t group_index) const override;
  void check_param_state(int64_t index, const std::map<std::string, Tensor>& state,
                         const ParamGroup& group) const override;
};

}  // namespace kiln::optim
