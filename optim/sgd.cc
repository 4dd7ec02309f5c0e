// SGD's update: one fused pass per contiguous f32/f64 CPU parameter, tensor ops otherwise.
// Both paths follow torch.optim.SGD's single-tensor implementation operation for operation.
#include "optim/sgd.h"

#include "core/parallel.h"

namespace kiln::optim {

namespace {

struct SGDStep {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize;
};

// p -= lr * d, with d the (weight-decayed, momentum-filtered) gradient. `first` seeds the
// momentum buffer with the gradient, as PyTorch does on a parameter's first step.
template <class T>
void sgd_fused(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t n, const SGDStep& s, bool first) {
  const T lr = static_cast<T>(s.lr), mom = static_cast<T>(s.momentum), wd = static_cast<T>(s.weight_decay);
  const T one_minus_damp = static_cast<T>(1 - s.dampening);
  const bool use_wd = s.weight_decay != 0, use_mom = s.momentum != 0, nesterov = s.nesterov, maximize = s.maximize;
  parallel_for(0, n, kGrainSize, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      T d = maximize ? -g[i] : g[i];
      if (use_wd) d = d + wd * p[i];
      if (use_mom) {
        T b = first ? d : mom * buf[i] + one_minus_damp * d;
        buf[i] = b;
        d = nesterov ? d + mom * b : b;
      }
      p[i] = p[i] - lr * d;
    }
  });
}

}  // namespace

Options SGDOptions::to_map() const {
  return {{"lr", lr},
          {"momentum", momentum},
          {"dampening", dampening},
          {"weight_decay", weight_decay},
          {"nesterov", nesterov ? 1.0 : 0.0},
          {"maximize", maximize ? 1.0 : 0.0}};
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : Optimizer("SGD", std::move(params), options.to_map()) {
  check_all_options();
}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions defaults)
    : Optimizer("SGD", std::move(groups), defaults.to_map()) {
  check_all_options();
}

void SGD::check_options(const Options& o, int64_t g) const {
  KILN_CHECK(o.at("lr") >= 0, "SGD: invalid lr {} in parameter group {} (must be >= 0)", o.at("lr"), g);
  KILN_CHECK(o.at("momentum") >= 0, "SGD: invalid momentum {} in parameter group {} (must be >= 0)",
             o.at("momentum"), g);
  KILN_CHECK(o.at("weight_decay") >= 0, "SGD: invalid weight_decay {} in parameter group {} (must be >= 0)",
             o.at("weight_decay"), g);
  KILN_CHECK(o.at("nesterov") == 0 || (o.at("momentum") > 0 && o.at("dampening") == 0),
             "SGD: nesterov momentum requires momentum > 0 and dampening = 0 (parameter group {} has momentum {}, "
             "dampening {})",
             g, o.at("momentum"), o.at("dampening"));
}

void SGD::check_param_state(int64_t index, const std::map<std::string, Tensor>& state, const ParamGroup&) const {
  KILN_CHECK(state.count("momentum_buffer"), "SGD.load_state_dict: missing key 'state.{}.momentum_buffer'", index);
}

void SGD::step() {
  for_each_param_with_grad([&](Tensor& p, const Tensor& grad, int64_t index, const ParamGroup& group) {
    const SGDStep s{group.get("lr"),           group.get("momentum"),       group.get("dampening"),
                    group.get("weight_decay"), group.get("nesterov") != 0, group.get("maximize") != 0};
    std::map<std::string, Tensor>& state = mutable_state(index);
    Tensor buf;
    bool first = false;
    if (s.momentum != 0) {
      auto it = state.find("momentum_buffer");
      first = it == state.end();
      if (first) buf = state["momentum_buffer"] = make_tensor(p.sizes(), p.dtype(), p.device());
      else buf = it->second;
    }

    if (fusable(p, grad, {&buf})) {
      dispatch_floating(p.dtype(), "SGD.step", [&]<class T>() {
        if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
          sgd_fused<T>(p.data_ptr<T>(), grad.data_ptr<T>(), buf.defined() ? buf.data_ptr<T>() : nullptr, p.numel(), s,
                       first);
      });
      p.storage()->bump_version();
      if (buf.defined()) buf.storage()->bump_version();
      return;
    }

    Tensor d = s.maximize ? -grad : grad;
    if (s.weight_decay != 0) d = add(d, p, s.weight_decay);
    if (s.momentum != 0) {
      if (first) buf.copy_(d);
      else buf.mul_(s.momentum).add_(d, 1 - s.dampening);
      d = s.nesterov ? add(d, buf, s.momentum) : buf;
    }
    p.add_(d, -s.lr);
  });
}

}  // namespace kiln::optim
