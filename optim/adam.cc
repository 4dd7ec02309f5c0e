// Adam/AdamW's update: one fused pass per contiguous f32/f64 CPU parameter, tensor ops
// otherwise. Both follow torch.optim.Adam's single-tensor implementation operation for
// operation (lerp for the first moment, addcmul for the second, addcdiv for the update).
#include "optim/adam.h"

#include <cmath>

#include "core/parallel.h"

namespace kiln::optim {

namespace {

struct AdamStep {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize, decoupled;
  double step_size;         // lr / (1 - beta1^t)
  double bias_corr2_sqrt;   // sqrt(1 - beta2^t)
};

// The per-element constants of one Adam step, in the parameter's type.
template <class T> struct AdamConsts {
  T lerp_w, one_minus_lerp_w, beta2, one_minus_beta2, weight_decay, decay, eps, bias_corr2_sqrt, neg_step_size,
      grad_sign;
  bool small_lerp_w, coupled_wd, decoupled_wd;
};

// One range of the fused update. Everything arrives by value and the pointers are restrict, so
// the compiler knows stores to p/m/v alias nothing it reads; the branches are selects on
// loop-invariant flags. With -fno-math-errno for the sqrt (see BUILD) the loop vectorises.
template <class T, bool kAmsgrad>
void adam_range(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, T* __restrict vmax,
                int64_t begin, int64_t end, const AdamConsts<T> c) {
  for (int64_t i = begin; i < end; ++i) {
    T gi = g[i] * c.grad_sign;  // exact negation for maximize
    T pi = p[i];
    pi = c.decoupled_wd ? pi * c.decay : pi;
    gi = c.coupled_wd ? gi + c.weight_decay * pi : gi;
    T mi = m[i];
    // torch.lerp's two forms, chosen by the weight as it does.
    const T lerp_lo = mi + c.lerp_w * (gi - mi), lerp_hi = gi - (gi - mi) * c.one_minus_lerp_w;
    mi = c.small_lerp_w ? lerp_lo : lerp_hi;
    T vi = v[i] * c.beta2;
    vi = vi + c.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    if constexpr (kAmsgrad) {
      vi = vmax[i] > vi ? vmax[i] : vi;
      vmax[i] = vi;
    }
    const T denom = std::sqrt(vi) / c.bias_corr2_sqrt + c.eps;
    p[i] = pi + c.neg_step_size * mi / denom;
  }
}

template <class T>
void adam_fused(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamStep& s) {
  AdamConsts<T> c;
  c.lerp_w = static_cast<T>(1 - s.beta1);
  c.one_minus_lerp_w = static_cast<T>(1) - c.lerp_w;
  c.small_lerp_w = std::abs(c.lerp_w) < T(0.5);
  c.beta2 = static_cast<T>(s.beta2);
  c.one_minus_beta2 = static_cast<T>(1 - s.beta2);
  c.weight_decay = static_cast<T>(s.weight_decay);
  c.decay = static_cast<T>(1 - s.lr * s.weight_decay);
  c.eps = static_cast<T>(s.eps);
  c.bias_corr2_sqrt = static_cast<T>(s.bias_corr2_sqrt);
  c.neg_step_size = static_cast<T>(-s.step_size);
  c.grad_sign = s.maximize ? T(-1) : T(1);
  c.coupled_wd = !s.decoupled && s.weight_decay != 0;
  c.decoupled_wd = s.decoupled && s.weight_decay != 0;
  parallel_for(0, n, kGrainSize, [&](int64_t begin, int64_t end) {
    if (vmax) adam_range<T, true>(p, g, m, v, vmax, begin, end, c);
    else adam_range<T, false>(p, g, m, v, nullptr, begin, end, c);
  });
}

}  // namespace

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
  for_each_param_with_grad([&](Tensor& p, const Tensor& grad, int64_t index, const ParamGroup& group) {
    AdamStep s{};
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

    if (fusable(p, grad, {&m, &v, &vmax})) {
      dispatch_floating(p.dtype(), "Adam.step", [&]<class T>() {
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
          adam_fused<T>(p.data_ptr<T>(), grad.data_ptr<T>(), m.data_ptr<T>(), v.data_ptr<T>(),
                        vmax.defined() ? vmax.data_ptr<T>() : nullptr, p.numel(), s);
      });
      for (const Tensor* t : {&p, &m, &v, &vmax})
        if (t->defined()) t->storage()->bump_version();
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
  });
}

}  // namespace kiln::optim
