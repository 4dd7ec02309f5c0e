// Module: the base of every layer. Parameters, buffers and submodules are registered by name,
// in order; everything that needs names (state_dict, parameter groups, data-parallel buckets)
// walks them with dotted paths ("features.0.weight").
#pragma once

#include <concepts>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/ops.h"

namespace kiln::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
/// Name -> tensor, as saved in checkpoints.
using StateDict = std::map<std::string, Tensor>;

class Module;

/// A shared module that is called like the module itself (`c_proj(gelu(c_fc(x)))`, where a plain
/// std::shared_ptr would need `c_fc->forward(x)`). It is a std::shared_ptr, so registration,
/// containers and `->` work unchanged, and a module object converts into one, moved into a new
/// shared_ptr: `ModulePtr<> mlp = Sequential{Linear(4, 8), ReLU()};` (no make_shared).
template <class M = Module>
class ModulePtr : public std::shared_ptr<M> {
 public:
  ModulePtr() = default;
  ModulePtr(std::nullptr_t) {}
  ModulePtr(std::shared_ptr<M> p) : std::shared_ptr<M>(std::move(p)) {}
  template <class U>
    requires std::derived_from<U, M> && (!std::is_same_v<U, M>)
  ModulePtr(std::shared_ptr<U> p) : std::shared_ptr<M>(std::move(p)) {}
  template <class U>
    requires std::derived_from<std::remove_cvref_t<U>, M> && (!std::is_lvalue_reference_v<U>)
  ModulePtr(U&& module) : std::shared_ptr<M>(std::make_shared<std::remove_cvref_t<U>>(std::move(module))) {}

  /// The module's call operator (its forward) with these arguments.
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    return (*this->get())(std::forward<Args>(args)...);
  }
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  /// With no name, type_name() is the dynamic type's own name ("MyBlock"), so a custom module
  /// need not repeat it.
  Module() = default;
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  /// Movable, so that layers can be built in place and handed to a container by value
  /// (`Sequential(Linear(4, 8), ReLU())`); a moved-from module is empty.
  Module(Module&&) = default;
  Module& operator=(Module&&) = delete;

  /// The layer's computation for one input; modules with other signatures define their own.
  virtual Tensor forward(const Tensor& input);
  /// Calling a module runs its forward, as nn.Module.__call__: `fc(x)`. A module whose forward
  /// takes other arguments adds `using Module::operator();` and an operator() forwarding them
  /// (MultiheadAttention does). Through a pointer, hold it as ModulePtr (below) to call it so.
  Tensor operator()(const Tensor& input) { return forward(input); }

  /// The type ("Linear") used in error messages and printing: the name given to the
  /// constructor, or else the demangled dynamic type without its namespaces (worked out on
  /// first use, since during construction the dynamic type is still Module).
  const std::string& type_name() const;

  // ---- registration (names must be unique within a module and contain no '.')
  Tensor register_parameter(const std::string& name, Tensor t, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor t);
  /// Returns the child as a callable ModulePtr: `c_fc = register_module("c_fc", Linear(4, 16));`
  /// then `c_fc(x)`.
  template <class M> ModulePtr<M> register_module(const std::string& name, std::shared_ptr<M> m) {
    add_child(name, m);
    return m;
  }
  /// A module object (`register_module("fc", Linear(4, 3))`), moved into a new shared_ptr.
  template <class M>
    requires std::derived_from<M, Module>
  ModulePtr<M> register_module(const std::string& name, M&& m) {
    return register_module(name, std::make_shared<M>(std::move(m)));
  }

  // ---- traversal (depth first, registration order, dotted names)
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const { return children_; }
  /// This module ("") and every descendant, with dotted paths.
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();
  int64_t num_parameters() const;

  // ---- modes and placement
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  /// Moves parameters and buffers in place (references to them stay valid). Casting to a
  /// dtype touches floating tensors only.
  void to(Device device);
  void to(DType dtype);
  void to(Device device, DType dtype);
  /// Clears gradients (set_to_none drops them; otherwise fills them with zeros).
  void zero_grad(bool set_to_none = true);

  // ---- checkpoints
  /// Parameters and buffers by dotted name (sharing storage with the module).
  StateDict state_dict() const;
  /// Copies values in; strict: refuses missing/unexpected keys. A shape mismatch always
  /// refuses. Nothing is modified unless every check passes.
  void load_state_dict(const StateDict& state, bool strict = true);

  /// Multi-line description, as printing a PyTorch module.
  virtual std::string repr(int indent = 0) const;
  /// One-line extra description ("in_features=784, out_features=256").
  virtual std::string extra_repr() const { return ""; }

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  /// Puts `m` in place of the child registered as `name` (throws naming it when there is none).
  void replace_child(const std::string& name, std::shared_ptr<Module> m);

 private:
  void collect(const std::string& prefix, bool recurse, bool params, NamedTensors& out) const;
  void check_name(const std::string& name, const char* what) const;

  mutable std::string type_name_;
  bool training_ = true;
  NamedTensors params_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace kiln::nn
