// Adam/AdamW's update: contiguous parameters are batched by (group, device, dtype, step count)
// into one fused kernels::adam_step call each; the rest take tensor ops. Both follow
// torch.optim.Adam's single-tensor implementation operation for operation (the kernels use
// lerp for the first moment, addcmul for the second, addcdiv for the update).
#include "optim/adam.h"

#include <algorithm>
#include <cmath>

#include "core/kernels.h"

namespace kiln::optim {

Options AdamOptions::to_map(double default_weight_decay) const {
  return {{"lr", lr},
          {"beta1", beta1},
          {"beta2", beta2},
          {"eps", eps},
          {"weight_decay", weight_decay.value_or(default_weight_decay)},
          {"amsgrad", amsgrad ? 1.0 : 0.0},
          {"maximize", maximize ? 1.0 : 0.0}};
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam("Adam", std::vector<ParamGroup>{ParamGroup(std::move(params))}, options, false) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions defaults) : Adam("Adam", std::move(groups), defaults, false) {}

Adam::Adam(std::string name, std::vector<ParamGroup> groups, AdamOptions defaults, bool decoupled_weight_decay)
    : Optimizer(std::move(name), std::move(groups), defaults.to_map(decoupled_weight_decay ? 1e-2 : 0.0)),
      decoupled_(decoupled_weight_decay) {
  check_all_options();
}

AdamW::AdamW(std::vector<Tensor> params, AdamOptions options)
    : Adam("AdamW", std::vector<ParamGroup>{ParamGroup(std::move(params))}, options, true) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamOptions defaults) : Adam("AdamW", std::move(groups), defaults, true) {}

void Adam::check_options(const Options& o, int64_t g) const {
  const std::string& n = name();
  KILN_CHECK(o.at("lr") >= 0, "{}: invalid lr {} in parameter group {} (must be >= 0)", n, o.at("lr"), g);
  KILN_CHECK(o.at("eps") >= 0, "{}: invalid eps {} in parameter group {} (must be >= 0)", n, o.at("eps"), g);
  KILN_CHECK(o.at("beta1") >= 0 && o.at("beta1") < 1, "{}: invalid beta1 {} in parameter group {} (must be in [0, 1))",
             n, o.at("beta1"), g);
  KILN_CHECK(o.at("beta2") >= 0 && o.at("beta2") < 1, "{}: invalid beta2 {} in parameter group {} (must be in [0, 1))",
             n, o.at("beta2"), g);
  KILN_CHECK(o.at("weight_decay") >= 0, "{}: invalid weight_decay {} in parameter group {} (must be >= 0)", n,
             o.at("weight_decay"), g);
}

void Adam::check_param_state(int64_t index, const std::map<std::string, Tensor>& state,
                             const ParamGroup& group) const {
  std::vector<std::string> needed = {"step", "exp_avg", "exp_avg_sq"};
  if (group.get("amsgrad") != 0) needed.push_back("max_exp_avg_sq");
  for (const std::string& k : needed)
    KILN_CHECK(state.count(k), "{}.load_state_dict: missing key 'state.{}.{}'", name(), index, k);
}

void Adam::step() {
  // Parameters one fused call can update together: they share options, device, dtype and step
  // count (which sets the bias corrections).
  struct Batch {
    const ParamGroup* group;
    Device device;
    DType dtype;
    int64_t t;
    AdamStepParams s;
    std::vector<Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
  };
  std::vector<Batch> batches;

  for_each_param_with_grad(
      [&](Tensor& p, const Tensor& grad, int64_t index, const ParamGroup& group) {
        AdamStepParams s;
        s.lr = group.get("lr");
        s.beta1 = group.get("beta1");
        s.beta2 = group.get("beta2");
        s.eps = group.get("eps");
        s.weight_decay = group.get("weight_decay");
        s.amsgrad = group.get("amsgrad") != 0;
        s.maximize = group.get("maximize") != 0;
        s.decoupled = decoupled_;

        std::map<std::string, Tensor>& state = mutable_state(index);
        auto buffer = [&](const char* key) -> Tensor& {
          Tensor& t = state[key];
          if (!t.defined()) t = zeros(p.sizes(), TensorOptions().dtype(p.dtype()).device(p.device()));
          return t;
        };
        Tensor& m = buffer("exp_avg");
        Tensor& v = buffer("exp_avg_sq");
        Tensor vmax = s.amsgrad ? buffer("max_exp_avg_sq") : Tensor();
        const int64_t t = increment_step(state);
        s.step_size = s.lr / (1 - std::pow(s.beta1, static_cast<double>(t)));
        s.bias_corr2_sqrt = std::sqrt(1 - std::pow(s.beta2, static_cast<double>(t)));

        if (kernels::adam_step.has(p.device().type) && fusable(p, grad, {&m, &v, &vmax})) {
          auto same = [&](const Batch& b) {
            return b.group == &group && b.device == p.device() && b.dtype == p.dtype() && b.t == t;
          };
          auto it = std::find_if(batches.begin(), batches.end(), same);
          if (it == batches.end()) it = batches.insert(batches.end(), Batch{&group, p.device(), p.dtype(), t, s});
          it->params.push_back(p);
          it->grads.push_back(grad);
          it->exp_avgs.push_back(m);
          it->exp_avg_sqs.push_back(v);
          if (vmax.defined()) it->max_exp_avg_sqs.push_back(vmax);
          return;
        }

        Tensor d = s.maximize ? -grad : grad;
        if (s.decoupled && s.weight_decay != 0) p.mul_(1 - s.lr * s.weight_decay);
        if (!s.decoupled && s.weight_decay != 0) d = add(d, p, s.weight_decay);
        m.mul_(s.beta1).add_(d, 1 - s.beta1);
        v.mul_(s.beta2).add_(d * d, 1 - s.beta2);
        Tensor v_hat = v;
        if (s.amsgrad) {
          vmax.copy_(maximum(vmax, v));
          v_hat = vmax;
        }
        Tensor denom = v_hat.sqrt() / s.bias_corr2_sqrt + s.eps;
        p.add_(m / denom, -s.step_size);
      },
      [&] {
        for (Batch& b : batches)
          kernels::adam_step[b.device](b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, b.max_exp_avg_sqs, b.s);
      });
}

}  // namespace kiln::optim
