#include "nn/module.h"

#include <algorithm>
#include <cstdlib>
#include <ostream>
#include <set>
#include <typeinfo>

#include <cxxabi.h>

#include <fmt/format.h>

#include "core/grad_mode.h"

namespace kiln::nn {
namespace {

/// "kiln::nn::Foo<a::B>" -> "Foo<a::B>": the namespaces before the template arguments go.
std::string unqualified_type_name(const std::type_info& type) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string name = status == 0 && demangled ? demangled : type.name();
  std::free(demangled);
  const size_t args = name.find('<');
  const size_t colons = name.rfind("::", args);
  return colons == std::string::npos ? name : name.substr(colons + 2);
}

}  // namespace

const std::string& Module::type_name() const {
  // Not cached while the dynamic type is still Module (an error raised by a derived constructor).
  if (type_name_.empty() && typeid(*this) != typeid(Module)) type_name_ = unqualified_type_name(typeid(*this));
  if (type_name_.empty()) {
    static const std::string plain = "Module";
    return plain;
  }
  return type_name_;
}

Tensor Module::forward(const Tensor&) {
  fail("{}: forward(Tensor) is not defined for this module", type_name());
}

void Module::check_name(const std::string& name, const char* what) const {
  KILN_CHECK(!name.empty() && name.find('.') == std::string::npos,
             "{}.register_{}: name '{}' must be non-empty and contain no '.'", type_name(), what, name);
  auto taken = [&](const auto& v) {
    return std::any_of(v.begin(), v.end(), [&](const auto& p) { return p.first == name; });
  };
  KILN_CHECK(!taken(params_) && !taken(buffers_) && !taken(children_), "{}.register_{}: '{}' is already registered",
             type_name(), what, name);
}

Tensor Module::register_parameter(const std::string& name, Tensor t, bool requires_grad) {
  check_name(name, "parameter");
  KILN_CHECK(t.defined(), "{}.register_parameter: '{}' is undefined", type_name(), name);
  if (!t.is_leaf()) t = t.detach();
  if (requires_grad) t.set_requires_grad(true);
  params_.emplace_back(name, t);
  return t;
}

Tensor Module::register_buffer(const std::string& name, Tensor t) {
  check_name(name, "buffer");
  buffers_.emplace_back(name, t);
  return t;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  check_name(name, "module");
  KILN_CHECK(m != nullptr, "{}.register_module: '{}' is null", type_name(), name);
  children_.emplace_back(name, std::move(m));
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module> m) {
  KILN_CHECK(m != nullptr, "{}.replace_child: the module for '{}' is null", type_name(), name);
  for (auto& [n, child] : children_)
    if (n == name) {
      child = std::move(m);
      return;
    }
  KILN_CHECK(false, "{}.replace_child: no child named '{}'", type_name(), name);
}

void Module::collect(const std::string& prefix, bool recurse, bool params, NamedTensors& out) const {
  for (const auto& [name, t] : params ? params_ : buffers_) out.emplace_back(prefix + name, t);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", true, params, out);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect("", recurse, true, out);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect("", recurse, false, out);
  return out;
}

static std::vector<Tensor> values(const NamedTensors& named) {
  std::vector<Tensor> out;
  out.reserve(named.size());
  for (const auto& p : named) out.push_back(p.second);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const { return values(named_parameters(recurse)); }
std::vector<Tensor> Module::buffers(bool recurse) const { return values(named_buffers(recurse)); }

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  // Iterative depth-first walk in registration order.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> stack{{"", shared_from_this()}};
  while (!stack.empty()) {
    auto [prefix, m] = stack.back();
    stack.pop_back();
    out.emplace_back(prefix, m);
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it)
      stack.emplace_back(prefix.empty() ? it->first : prefix + "." + it->first, it->second);
  }
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::to(Device device) {
  NoGradGuard g;
  for (Tensor t : parameters()) set_data(t, t.to(device));
  for (Tensor t : buffers()) set_data(t, t.to(device));
}

void Module::to(DType dtype) {
  NoGradGuard g;
  for (Tensor t : parameters())
    if (t.is_floating_point()) set_data(t, t.to(dtype));
  for (Tensor t : buffers())
    if (t.is_floating_point()) set_data(t, t.to(dtype));
}

void Module::to(Device device, DType dtype) {
  to(device);
  to(dtype);
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard ng;
      g.zero_();
    }
  }
}

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [name, t] : named_parameters()) out[name] = t;
  for (auto& [name, t] : named_buffers()) out[name] = t;
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  StateDict mine = state_dict();
  std::vector<std::string> missing, unexpected, mismatched;
  for (const auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it == state.end()) missing.push_back(name);
    else if (it->second.sizes() != t.sizes())
      mismatched.push_back(fmt::format("{} (checkpoint {}, model {})", name, it->second.sizes(), t.sizes()));
  }
  for (const auto& [name, t] : state)
    if (!mine.count(name)) unexpected.push_back(name);
  KILN_CHECK(mismatched.empty(), "{}.load_state_dict: shape mismatch for {}", type_name(), fmt::join(mismatched, ", "));
  KILN_CHECK(!strict || (missing.empty() && unexpected.empty()),
             "{}.load_state_dict: missing keys [{}], unexpected keys [{}]", type_name(), fmt::join(missing, ", "),
             fmt::join(unexpected, ", "));
  NoGradGuard g;
  for (auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it != state.end()) t.copy_(it->second);
  }
}

std::string Module::repr(int indent) const {
  std::string extra = extra_repr();
  if (children_.empty()) return type_name() + "(" + extra + ")";
  std::string pad(indent + 2, ' ');
  std::string s = type_name() + "(" + (extra.empty() ? "" : extra) + "\n";
  for (const auto& [name, child] : children_) s += pad + "(" + name + "): " + child->repr(indent + 2) + "\n";
  return s + std::string(indent, ' ') + ")";
}

std::ostream& operator<<(std::ostream& os, const Module& m) { return os << m.repr(); }

}  // namespace kiln::nn
