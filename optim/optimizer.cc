// Optimizer bookkeeping: groups and their options, per-parameter state, state_dict save/load.
// load_state_dict validates everything into fresh containers before touching the optimizer.
#include "optim/optimizer.h"

#include <algorithm>
#include <charconv>
#include <unordered_set>

#include <fmt/ranges.h>

#include "core/grad_mode.h"

namespace kiln::optim {

namespace {

// The option a learning-rate scheduler adds to every group (the lr it started from).
constexpr const char* kInitialLr = "initial_lr";

// The parameter dtypes that get an f32 master copy under master weights.
bool is_low_precision(DType t) { return t == kFloat16 || t == kBFloat16; }

// Splits "<prefix><index>.<field>" into index and field; false when `key` has another form.
bool parse_key(const std::string& key, const std::string& prefix, int64_t& index, std::string& field) {
  if (key.compare(0, prefix.size(), prefix) != 0) return false;
  size_t dot = key.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size() || dot + 1 == key.size()) return false;
  const char* first = key.data() + prefix.size();
  const char* last = key.data() + dot;
  auto [end, ec] = std::from_chars(first, last, index);
  if (ec != std::errc() || end != last || index < 0) return false;
  field = key.substr(dot + 1);
  return true;
}

}  // namespace

double ParamGroup::get(const std::string& option) const {
  auto it = options.find(option);
  KILN_CHECK(it != options.end(), "ParamGroup: no option '{}'", option);
  return it->second;
}

Optimizer::Optimizer(std::string name, std::vector<Tensor> params, Options defaults)
    : Optimizer(std::move(name), std::vector<ParamGroup>{ParamGroup(std::move(params))}, std::move(defaults)) {}

Optimizer::Optimizer(std::string name, std::vector<ParamGroup> groups, Options defaults)
    : name_(std::move(name)), defaults_(std::move(defaults)) {
  int64_t total = 0;
  for (const ParamGroup& g : groups) total += static_cast<int64_t>(g.params.size());
  KILN_CHECK(total > 0, "{}: got an empty parameter list", name_);
  for (ParamGroup& g : groups) {
    ParamGroup complete = complete_group(std::move(g));
    state_.resize(state_.size() + complete.params.size());
    groups_.push_back(std::move(complete));
  }
  masters_.resize(state_.size());
}

ParamGroup Optimizer::complete_group(ParamGroup group) const {
  const int64_t gi = static_cast<int64_t>(groups_.size());
  for (const auto& [key, value] : group.options)
    KILN_CHECK(defaults_.count(key) || key == kInitialLr, "{}: parameter group {} has unknown option '{}'", name_,
               gi, key);
  for (const auto& [key, value] : defaults_) group.options.emplace(key, value);
  std::unordered_set<const TensorImpl*> seen;
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params) seen.insert(p.unsafe_impl());
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    KILN_CHECK(p.defined(), "{}: parameter {} of group {} is undefined", name_, i, gi);
    KILN_CHECK(p.is_floating_point(), "{}: parameter {} of group {} has dtype {}; only floating tensors can be optimized",
               name_, i, gi, p.dtype());
    KILN_CHECK(p.is_leaf(), "{}: parameter {} of group {} (shape {}) is not a leaf tensor; optimize the leaf it was "
               "computed from", name_, i, gi, p.sizes());
    KILN_CHECK(seen.insert(p.unsafe_impl()).second,
               "{}: parameter {} of group {} (shape {}) appears more than once in the parameter groups", name_, i, gi,
               p.sizes());
  }
  return group;
}

void Optimizer::add_param_group(ParamGroup group) {
  ParamGroup complete = complete_group(std::move(group));
  check_options(complete.options, static_cast<int64_t>(groups_.size()));
  state_.resize(state_.size() + complete.params.size());
  masters_.resize(state_.size());
  groups_.push_back(std::move(complete));
}

void Optimizer::check_all_options() const {
  for (size_t g = 0; g < groups_.size(); ++g) check_options(groups_[g].options, static_cast<int64_t>(g));
}

int64_t Optimizer::num_params() const { return static_cast<int64_t>(state_.size()); }

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (ParamGroup& group : groups_) {
    for (Tensor& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      if (set_to_none) p.set_grad(Tensor());
      else g.zero_();
    }
  }
}

double Optimizer::lr() const { return groups_.front().get("lr"); }

void Optimizer::set_lr(double lr) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    Options o = groups_[g].options;
    o["lr"] = lr;
    check_options(o, static_cast<int64_t>(g));
  }
  for (ParamGroup& group : groups_) group.options["lr"] = lr;
}

const std::map<std::string, Tensor>& Optimizer::state(int64_t index) const {
  KILN_CHECK(index >= 0 && index < num_params(), "{}.state: index {} out of range for {} parameters", name_, index,
             num_params());
  return state_[index];
}

std::map<std::string, Tensor>& Optimizer::mutable_state(int64_t index) { return state_[index]; }

void Optimizer::set_master_weights(bool on) {
  master_weights_ = on;
  if (!on)
    for (Tensor& m : masters_) m = Tensor();
}

const Tensor& Optimizer::master(int64_t index) const {
  KILN_CHECK(index >= 0 && index < num_params(), "{}.master: index {} out of range for {} parameters", name_, index,
             num_params());
  return masters_[index];
}

Tensor* Optimizer::master_for(const Tensor& p, int64_t index) {
  if (!master_weights_ || !is_low_precision(p.dtype())) return nullptr;
  Tensor& m = masters_[index];
  if (!m.defined()) m = p.detach().to(kFloat32);
  return &m;
}

DType Optimizer::state_dtype(const Tensor& p) const {
  return master_weights_ && is_low_precision(p.dtype()) ? kFloat32 : p.dtype();
}

void Optimizer::check_grad(const Tensor& p, const Tensor& g, int64_t index) const {
  KILN_CHECK(g.sizes() == p.sizes(), "{}.step: parameter {} has shape {} but its gradient has shape {}", name_, index,
             p.sizes(), g.sizes());
  KILN_CHECK(g.device() == p.device(), "{}.step: parameter {} is on {} but its gradient is on {}", name_, index,
             p.device(), g.device());
  KILN_CHECK(g.is_floating_point(), "{}.step: gradient of parameter {} has dtype {}", name_, index, g.dtype());
}

void Optimizer::check_param_state(int64_t, const std::map<std::string, Tensor>&, const ParamGroup&) const {}

StateDict Optimizer::state_dict() const {
  StateDict out;
  int64_t index = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::string prefix = "param_groups." + std::to_string(g) + ".";
    for (const auto& [key, value] : groups_[g].options) out[prefix + key] = scalar_tensor(value, kFloat64);
    std::vector<int64_t> indices(groups_[g].params.size());
    for (int64_t& i : indices) i = index++;
    out[prefix + "params"] = tensor<int64_t>(indices, {static_cast<int64_t>(indices.size())});
  }
  NoGradGuard no_grad;
  for (size_t i = 0; i < state_.size(); ++i)
    for (const auto& [key, value] : state_[i]) out["state." + std::to_string(i) + "." + key] = value.clone();
  for (size_t i = 0; i < masters_.size(); ++i)
    if (masters_[i].defined()) out["master." + std::to_string(i)] = masters_[i].clone();
  return out;
}

void Optimizer::load_state_dict(const StateDict& sd) {
  const int64_t ngroups = static_cast<int64_t>(groups_.size());
  std::vector<const Tensor*> param_at;
  std::vector<int64_t> group_of;
  for (int64_t g = 0; g < ngroups; ++g)
    for (const Tensor& p : groups_[g].params) {
      param_at.push_back(&p);
      group_of.push_back(g);
    }
  const std::vector<std::string> names = state_names();

  std::vector<Options> new_options(ngroups);
  std::vector<bool> has_params(ngroups, false);
  std::vector<std::map<std::string, Tensor>> new_state(state_.size());
  std::vector<Tensor> new_masters(state_.size());
  NoGradGuard no_grad;

  for (const auto& [key, t] : sd) {
    KILN_CHECK(t.defined(), "{}.load_state_dict: key '{}' holds an undefined tensor", name_, key);
    int64_t idx = 0;
    std::string field;
    if (parse_key(key, "param_groups.", idx, field)) {
      KILN_CHECK(idx < ngroups, "{}.load_state_dict: unexpected key '{}': this optimizer has {} parameter group(s)",
                 name_, key, ngroups);
      if (field == "params") {
        std::vector<int64_t> expected;
        for (int64_t i = 0; i < static_cast<int64_t>(group_of.size()); ++i)
          if (group_of[i] == idx) expected.push_back(i);
        KILN_CHECK(t.dim() == 1 && !t.is_floating_point(),
                   "{}.load_state_dict: '{}' should be a 1-D integer tensor, got shape {} dtype {}", name_, key,
                   t.sizes(), t.dtype());
        std::vector<int64_t> saved = t.to_vector<int64_t>();
        KILN_CHECK(saved == expected,
                   "{}.load_state_dict: '{}' lists parameters {} but group {} of this optimizer holds parameters {}",
                   name_, key, saved, idx, expected);
        has_params[idx] = true;
        continue;
      }
      KILN_CHECK(defaults_.count(field) || field == kInitialLr,
                 "{}.load_state_dict: unexpected key '{}': {} has no option '{}'", name_, key, name_, field);
      KILN_CHECK(t.numel() == 1, "{}.load_state_dict: '{}' should hold one value, got shape {}", name_, key,
                 t.sizes());
      new_options[idx][field] = t.item<double>();
    } else if (parse_key(key, "state.", idx, field)) {
      KILN_CHECK(idx < num_params(), "{}.load_state_dict: unexpected key '{}': this optimizer has {} parameter(s)",
                 name_, key, num_params());
      KILN_CHECK(std::find(names.begin(), names.end(), field) != names.end(),
                 "{}.load_state_dict: unexpected key '{}': {} keeps no per-parameter state named '{}' (it keeps {})",
                 name_, key, name_, field, names);
      const Tensor& p = *param_at[idx];
      if (field == "step") {
        KILN_CHECK(t.numel() == 1, "{}.load_state_dict: '{}' should hold one value, got shape {}", name_, key,
                   t.sizes());
        new_state[idx][field] = scalar_tensor(t.item<double>(), kFloat64);
      } else {
        KILN_CHECK(t.sizes() == p.sizes(),
                   "{}.load_state_dict: shape mismatch for '{}': saved {}, but parameter {} has shape {}", name_, key,
                   t.sizes(), idx, p.sizes());
        Tensor copy = make_tensor(p.sizes(), state_dtype(p), p.device());
        copy.copy_(t);
        new_state[idx][field] = copy;
      }
    } else if (key.rfind("master.", 0) == 0) {
      const std::string digits = key.substr(7);
      int64_t i = -1;
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), i);
      KILN_CHECK(ec == std::errc() && end == digits.data() + digits.size() && !digits.empty() && i >= 0,
                 "{}.load_state_dict: unexpected key '{}' (master copies are 'master.<param>')", name_, key);
      KILN_CHECK(i < num_params(), "{}.load_state_dict: unexpected key '{}': this optimizer has {} parameter(s)",
                 name_, key, num_params());
      KILN_CHECK(master_weights_,
                 "{}.load_state_dict: the state holds master weights ('{}') but this optimizer keeps none; call "
                 "set_master_weights() first",
                 name_, key);
      const Tensor& p = *param_at[i];
      KILN_CHECK(is_low_precision(p.dtype()),
                 "{}.load_state_dict: '{}' is a master copy, but parameter {} is {} and keeps none (only f16/bf16 "
                 "parameters do)",
                 name_, key, i, p.dtype());
      KILN_CHECK(t.sizes() == p.sizes(),
                 "{}.load_state_dict: shape mismatch for '{}': saved {}, but parameter {} has shape {}", name_, key,
                 t.sizes(), i, p.sizes());
      KILN_CHECK(t.is_floating_point(), "{}.load_state_dict: '{}' has dtype {}; a master copy is floating", name_,
                 key, t.dtype());
      Tensor copy = make_tensor(p.sizes(), kFloat32, p.device());
      copy.copy_(t);
      new_masters[i] = copy;
    } else {
      fail("{}.load_state_dict: unexpected key '{}' (keys are 'state.<param>.<name>', "
           "'param_groups.<group>.<option>' or 'master.<param>')",
           name_, key);
    }
  }

  for (int64_t g = 0; g < ngroups; ++g) {
    KILN_CHECK(has_params[g], "{}.load_state_dict: missing key 'param_groups.{}.params'", name_, g);
    for (const auto& [option, value] : defaults_)
      KILN_CHECK(new_options[g].count(option), "{}.load_state_dict: missing key 'param_groups.{}.{}'", name_, g,
                 option);
    check_options(new_options[g], g);
  }
  for (int64_t i = 0; i < num_params(); ++i) {
    if (new_state[i].empty()) continue;
    ParamGroup view;
    view.options = new_options[group_of[i]];
    check_param_state(i, new_state[i], view);
  }

  // Every check passed: commit.
  for (int64_t g = 0; g < ngroups; ++g) groups_[g].options = std::move(new_options[g]);
  state_ = std::move(new_state);
  masters_ = std::move(new_masters);
}

int64_t increment_step(std::map<std::string, Tensor>& state) {
  Tensor& step = state["step"];
  if (!step.defined()) step = scalar_tensor(0.0, kFloat64);
  double* v = step.data_ptr<double>();
  *v += 1;
  step.storage()->bump_version();
  return static_cast<int64_t>(*v);
}

bool fusable(const Tensor& p, const Tensor& grad, std::initializer_list<const Tensor*> buffers) {
  auto ok = [&](const Tensor& t) {
    return t.device() == p.device() && t.dtype() == p.dtype() && t.is_contiguous();
  };
  if (!p.is_floating_point() || !ok(p) || !ok(grad)) return false;
  for (const Tensor* b : buffers)
    if (b->defined() && !ok(*b)) return false;
  return true;
}

}  // namespace kiln::optim
