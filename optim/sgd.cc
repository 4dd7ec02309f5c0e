// SGD's update: contiguous parameters are batched by (group, device, dtype, first step) into one
// fused kernels::sgd_step call each; the rest take tensor ops. Both paths follow
// torch.optim.SGD's single-tensor implementation operation for operation.
#include "optim/sgd.h"

#include <algorithm>

#include "core/kernels.h"

namespace kiln::optim {

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
  // Parameters one fused call can update together: they share options, device, dtype and
  // whether this is their first step (which seeds the momentum buffer).
  struct Batch {
    const ParamGroup* group;
    Device device;
    DType dtype;
    bool first;
    SGDStepParams s;
    std::vector<Tensor> params, grads, bufs;
  };
  std::vector<Batch> batches;

  for_each_param_with_grad(
      [&](Tensor& p, const Tensor& grad, int64_t index, const ParamGroup& group) {
        SGDStepParams s;
        s.lr = group.get("lr");
        s.momentum = group.get("momentum");
        s.dampening = group.get("dampening");
        s.weight_decay = group.get("weight_decay");
        s.nesterov = group.get("nesterov") != 0;
        s.maximize = group.get("maximize") != 0;
        std::map<std::string, Tensor>& state = mutable_state(index);
        Tensor buf;
        bool first = false;
        if (s.momentum != 0) {
          auto it = state.find("momentum_buffer");
          first = it == state.end();
          if (first) buf = state["momentum_buffer"] = make_tensor(p.sizes(), p.dtype(), p.device());
          else buf = it->second;
        }

        if (kernels::sgd_step.has(p.device().type) && fusable(p, grad, {&buf})) {
          auto same = [&](const Batch& b) {
            return b.group == &group && b.device == p.device() && b.dtype == p.dtype() && b.first == first;
          };
          auto it = std::find_if(batches.begin(), batches.end(), same);
          if (it == batches.end()) it = batches.insert(batches.end(), Batch{&group, p.device(), p.dtype(), first, s});
          it->params.push_back(p);
          it->grads.push_back(grad);
          if (buf.defined()) it->bufs.push_back(buf);
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
      },
      [&] {
        for (Batch& b : batches) kernels::sgd_step[b.device](b.params, b.grads, b.bufs, b.s, b.first);
      });
}

}  // namespace kiln::optim
