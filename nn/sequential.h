// Sequential: runs its children in order, named "0", "1", ... as in PyTorch. Built from module
// objects or shared pointers, mixed: `Sequential seq{Linear(4, 8), ReLU(), shared_linear};`, and
// shared without make_shared: `ModulePtr<> model = Sequential{...};`, then `model(x)`.
// Prefer braces: they construct the layers left to right, so under a fixed seed the initial
// weights are those of the same layers pushed one by one. In parentheses the compiler may build
// the arguments in any order (GCC goes right to left), as with libtorch's Sequential.
#pragma once

#include <concepts>
#include <initializer_list>
#include <memory>
#include <type_traits>

#include "core/error.h"
#include "nn/module.h"

namespace kiln::nn {

/// A layer as Sequential takes it: a module object (moved into a new shared_ptr) or a
/// shared_ptr to one (shared, as PyTorch shares a module put in two containers).
template <class T>
concept ModuleLike = std::derived_from<std::remove_cvref_t<T>, Module> && !std::is_lvalue_reference_v<T>;
template <class T>
concept ModulePointer = requires(const std::remove_cvref_t<T>& p) {
  { std::shared_ptr<Module>(p) };
  requires std::derived_from<typename std::remove_cvref_t<T>::element_type, Module>;
};

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  Sequential(std::initializer_list<std::shared_ptr<Module>> layers) : Module("Sequential") {
    for (const auto& l : layers) push_back(l);
  }
  /// Module objects by value (`Linear(4, 8)`) and shared_ptrs, in order. A single Sequential
  /// argument is a move, not nesting: nest one with push_back or beside another layer. With all
  /// arguments shared_ptrs, braces pick the initializer_list constructor, to the same effect.
  template <class... Layers>
    requires(sizeof...(Layers) > 0 && ((ModuleLike<Layers> || ModulePointer<Layers>) && ...))
  explicit Sequential(Layers&&... layers) : Module("Sequential") {
    (push_back(std::forward<Layers>(layers)), ...);
  }

  void push_back(std::shared_ptr<Module> layer) {
    layers_.push_back(register_module(std::to_string(layers_.size()), std::move(layer)));
  }
  template <ModuleLike M>
  void push_back(M&& layer) {
    push_back(std::make_shared<std::remove_cvref_t<M>>(std::move(layer)));
  }

  /// The layers in order, except that a ReLU followed by a MaxPool2d runs as max pooling, then
  /// ReLU (swapped_relu_pool): the same values and gradients, with ReLU's passes over a quarter
  /// of the elements.
  Tensor forward(const Tensor& x) override;
  size_t size() const { return layers_.size(); }
  /// Puts `layer` in place of element i under the same name (how FSDP wraps each block).
  void replace(size_t i, std::shared_ptr<Module> layer) {
    KILN_CHECK(i < layers_.size(), "Sequential::replace: index {} of {} layers", i, layers_.size());
    replace_child(std::to_string(i), layer);
    layers_[i] = std::move(layer);
  }
  const std::shared_ptr<Module>& operator[](size_t i) const { return layers_.at(i); }

  /// Whether layers i and i + 1 are exactly a ReLU and a MaxPool2d (not subclasses), which
  /// forward() runs swapped. ReLU is monotone, so the maximum of a window's ReLUs is the ReLU
  /// of its maximum, and the same element is the window's first maximum either way whenever the
  /// maximum is positive (when it is not, both give zero gradients); NaN propagates alike. The
  /// forward values are equal (a zero may come out with the other sign), the gradients
  /// bit-identical. In the Fashion-MNIST CNN, after a 28 x 28 convolution, ReLU's forward and
  /// backward passes over 12.8 MB each become passes over 3.2 MB.
  bool swapped_relu_pool(size_t i) const;

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace kiln::nn
