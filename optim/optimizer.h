// Optimizer: the base of every optimizer. Holds parameter groups (each with its own options),
// per-parameter state keyed by the parameter's position, and a saveable state_dict.
// Promise: step() runs under NoGradGuard and updates parameters in place (the tensor handles the
// model holds stay valid); parameters whose .grad is undefined are skipped.
//
// Gradient accumulation. Every backward() adds into the leaves' .grad, so N micro-batches can
// stand in for one large batch: run backward N times, then step() once and zero_grad() once.
// Scale each micro-batch loss by 1/N so the accumulated gradient is the average, as one backward
// over the whole batch would give:
//
//   opt.zero_grad();
//   for (int i = 0; i < n_micro; ++i) {
//     Tensor loss = loss_fn(model.forward(x[i]), y[i]) / static_cast<double>(n_micro);
//     loss.backward();                      // accumulates into every parameter's .grad
//   }
//   opt.step();                             // one update from the summed (averaged) gradient
//
// Clip (clip_grad_norm_) after the last backward and before step(), so the norm is the
// accumulated gradient's. Under data parallel, skip the all-reduce on all but the last
// micro-batch (DistributedDataParallel::no_sync).
//
// Master weights (mixed precision's "O2", see amp/amp.h): set_master_weights() makes the
// optimizer keep an f32 copy of every f16/bf16 parameter. step() then updates the copy with the
// gradient in f32, keeps its state (momentum, moments) in f32, and writes the rounded result
// back into the parameter, so updates smaller than the parameter's precision still add up.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/ops.h"

namespace kiln::optim {

/// Option name -> value ("lr", "momentum", "weight_decay", "beta1", "beta2", "eps",
/// "dampening", "nesterov" (0/1), "amsgrad" (0/1), "maximize" (0/1), ...).
using Options = std::map<std::string, double>;
/// Name -> tensor, as saved in checkpoints (see Optimizer::state_dict for the keys).
using StateDict = std::map<std::string, Tensor>;

/// Parameters that share options. Options left out take the optimizer's defaults.
struct ParamGroup {
  std::vector<Tensor> params;
  Options options;

  ParamGroup() = default;
  ParamGroup(std::vector<Tensor> p, Options o = {}) : params(std::move(p)), options(std::move(o)) {}  // NOLINT
  /// The option's value; throws naming the option when the group has none.
  double get(const std::string& option) const;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Updates every parameter that has a gradient, once.
  virtual void step() = 0;

  /// Clears gradients: set_to_none drops them (the default, as PyTorch), otherwise fills them
  /// with zeros.
  void zero_grad(bool set_to_none = true);

  /// Appends a group; options it leaves out take the defaults. Its parameters get the next
  /// global indices. Throws on an unknown option or a parameter already in a group.
  void add_param_group(ParamGroup group);
  /// Groups may have their options edited (e.g. a per-group lr). Do not add or remove
  /// parameters through this reference: state is keyed by position; use add_param_group.
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  const Options& defaults() const { return defaults_; }
  /// "SGD", "Adam", ... (used in error messages).
  const std::string& name() const { return name_; }
  /// Parameters over all groups.
  int64_t num_params() const;

  /// The learning rate of the first group.
  double lr() const;
  /// Sets the learning rate of every group.
  void set_lr(double lr);

  /// A snapshot (copies) of the optimizer's state:
  ///   "param_groups.<g>.<option>"  0-dim f64, every option of group g;
  ///   "param_groups.<g>.params"    1-D i64, the global indices of group g's parameters;
  ///   "state.<i>.<name>"           per-parameter state of the parameter at global index i
  ///                                (buffers shaped as the parameter; "step" a 0-dim f64);
  ///   "master.<i>"                 with master weights: the f32 copy of parameter i.
  /// Virtual so that an optimizer whose state is spread over processes (dist's ZeRO) can refuse
  /// a local snapshot that would silently hold only its own part.
  virtual StateDict state_dict() const;
  /// Restores a state_dict taken from an optimizer of the same kind over parameters of the same
  /// shapes in the same group layout. Throws naming the missing/unexpected key or the shape
  /// mismatch; nothing changes unless every check passes. Buffers are copied to each
  /// parameter's device and dtype (f32 for a parameter with a master copy). With master weights
  /// on, a low-precision parameter the state holds no "master.<i>" for takes a fresh copy of
  /// itself at its next step.
  virtual void load_state_dict(const StateDict& state);

  /// Per-parameter state of the parameter at global index i (empty before its first step).
  const std::map<std::string, Tensor>& state(int64_t index) const;

  /// Keeps f32 master copies of the f16/bf16 parameters from the next step on (see the top of
  /// this file). Each copy is taken from its parameter at that parameter's first step, or
  /// restored by load_state_dict. Turning it off drops the copies.
  void set_master_weights(bool on = true);
  bool master_weights() const { return master_weights_; }
  /// The f32 master copy of the parameter at global index i (undefined when it has none).
  const Tensor& master(int64_t index) const;

 protected:
  /// `defaults` names every option this optimizer accepts, with its default value.
  Optimizer(std::string name, std::vector<Tensor> params, Options defaults);
  Optimizer(std::string name, std::vector<ParamGroup> groups, Options defaults);

  /// Per-parameter state names this optimizer writes ("momentum_buffer", "step", ...).
  virtual std::vector<std::string> state_names() const = 0;
  /// Checks one parameter's state about to be loaded is complete for `group`'s options; throws
  /// naming what is missing. The default accepts anything state_names() allows.
  virtual void check_param_state(int64_t index, const std::map<std::string, Tensor>& state,
                                 const ParamGroup& group) const;
  /// Checks a group's option values (lr >= 0, ...); throws naming the option and the group.
  /// Called by add_param_group and load_state_dict, and by check_all_options, which each
  /// subclass constructor calls last (a base constructor cannot reach the override).
  virtual void check_options(const Options& options, int64_t group_index) const {}
  void check_all_options() const;

  std::map<std::string, Tensor>& mutable_state(int64_t index);

  /// Calls f(param, grad, global_index, group) for every parameter with a defined gradient, in
  /// order, under NoGradGuard. The gradient is checked for shape and device and converted to
  /// the parameter's dtype. With master weights, a low-precision parameter is stood in for by its
  /// f32 master copy (the gradient converted to f32), which is rounded back into it after the
  /// walk.
  template <class F> void for_each_param_with_grad(F&& f) {
    for_each_param_with_grad(std::forward<F>(f), [] {});
  }
  /// As above, but f may gather parameters (and the gradients it is given) and leave their
  /// update to `flush`, which runs once after the walk, under NoGradGuard, before master copies
  /// are rounded back: one fused kernel call per batch of parameters.
  template <class F, class Flush> void for_each_param_with_grad(F&& f, Flush&& flush);

 private:
  /// Fills defaults in and checks for unknown options and parameters already present.
  ParamGroup complete_group(ParamGroup group) const;
  void check_grad(const Tensor& p, const Tensor& g, int64_t index) const;
  /// The master copy that stands in for `p` (global index `index`) in a step, created from p when
  /// missing; null when p keeps no master copy.
  Tensor* master_for(const Tensor& p, int64_t index);
  /// The dtype per-parameter state of `p` is kept in.
  DType state_dtype(const Tensor& p) const;

  std::string name_;
  Options defaults_;
  std::vector<ParamGroup> groups_;
  std::vector<std::map<std::string, Tensor>> state_;  // by global parameter index
  bool master_weights_ = false;
  std::vector<Tensor> masters_;  // by global parameter index; undefined where none (yet)
};

/// Increments the 0-dim f64 "step" counter in `state` (creating it at 0) and returns the new
/// value.
int64_t increment_step(std::map<std::string, Tensor>& state);

/// True when p, its gradient and every defined buffer can be handed to a fused step kernel
/// (kernels::sgd_step, kernels::adam_step): all contiguous, of p's dtype and on p's device.
/// Whether p's device has that kernel is the caller's question.
bool fusable(const Tensor& p, const Tensor& grad, std::initializer_list<const Tensor*> buffers);

}  // namespace kiln::optim

#include "core/grad_mode.h"

namespace kiln::optim {

template <class F, class Flush> void Optimizer::for_each_param_with_grad(F&& f, Flush&& flush) {
  NoGradGuard no_grad;
  std::vector<std::pair<Tensor*, const Tensor*>> to_round;  // (parameter, its master copy)
  int64_t index = 0;
  for (ParamGroup& group : groups_) {
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (g.defined()) {
        check_grad(p, g, index);
        if (Tensor* m = master_for(p, index)) {
          if (g.dtype() != m->dtype()) g = g.to(m->dtype());
          f(*m, g, index, group);
          to_round.emplace_back(&p, m);
        } else {
          if (g.dtype() != p.dtype()) g = g.to(p.dtype());
          f(p, g, index, group);
        }
      }
      ++index;
    }
  }
  flush();
  for (auto& [p, m] : to_round) p->copy_(*m);  // rounds to the parameter's precision
}

}  // namespace kiln::optim
