// The tape's building blocks: a Node is one recorded op (its backward function, the tensors it
// saved, and edges to the nodes that produced its inputs); AccumulateGrad is the node that
// ends every path at a leaf and adds into its .grad.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/autograd_meta.h"
#include "core/tensor.h"

namespace kiln::autograd {

class Node;

/// Where a gradient goes: input `input_nr` of `fn` (fn is null for inputs needing no grad).
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

/// Shape, dtype and device of what an edge's gradient must look like.
struct InputMeta {
  Shape shape;
  DType dtype;
  Device device;
};

/// A tensor saved for backward: stored detached (no reference cycle through grad_fn) together
/// with the version it had, so a later in-place write is caught when backward unpacks it.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t) : data_(t.defined() ? t.detach() : Tensor()), version_(t.defined() ? t.version() : 0) {}
  /// Returns the tensor; throws naming `op` if it was modified in place since it was saved.
  Tensor unpack(const char* op) const;
  void reset() { data_ = Tensor(); }

 private:
  Tensor data_;
  uint32_t version_ = 0;
};

class Node {
 public:
  Node();
  /// Frees long chains iteratively (a 100k-op graph must not overflow the stack).
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  /// Gradients for each next edge from the gradients of this node's outputs (undefined ones
  /// stand for zeros).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  virtual std::string name() const = 0;
  /// Frees saved tensors after backward (unless retain_graph).
  virtual void release_saved() {}

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  const std::vector<InputMeta>& input_metas() const { return input_metas_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  size_t num_outputs() const { return outputs_.size(); }
  /// The live output tensor `i` (to retain its grad), or null if gone.
  std::shared_ptr<TensorImpl> output(size_t i) const { return outputs_[i].lock(); }
  /// Hooks registered on output `i` (shared with the tensor, and alive after it).
  using HookList = std::vector<std::function<Tensor(const Tensor&)>>;
  const HookList& hooks(size_t i) const { return *hooks_[i]; }

  /// Connects this node to the inputs of the op it records.
  void set_next_edges(const std::vector<Tensor>& inputs);
  void add_output(const Tensor& out);

 private:
  std::vector<Edge> next_edges_;
  std::vector<InputMeta> input_metas_;
  std::vector<std::weak_ptr<TensorImpl>> outputs_;
  std::vector<std::shared_ptr<HookList>> hooks_;
  uint64_t sequence_nr_;
};

/// The sink at a leaf: runs its grad hooks, accumulates into .grad, then runs its
/// post-accumulate hooks (what data parallel listens to).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(const Tensor& leaf) : leaf_(leaf.impl_ptr()) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::weak_ptr<TensorImpl> leaf_;
};

/// A node whose backward is a function (a lambda capturing SavedTensors). Releasing it drops
/// the function and everything it captured; a second backward through it then fails clearly.
/// A node whose function saves nothing (`saves_nothing`) is never released: re-running it is
/// safe, and a cast shared by several graphs (autocast's weight cache) needs that.
class FunctionNode final : public Node {
 public:
  using Backward = std::function<std::vector<Tensor>(const std::vector<Tensor>& grads)>;
  FunctionNode(std::string name, Backward fn, bool saves_nothing = false)
      : name_(std::move(name)), fn_(std::move(fn)), saves_nothing_(saves_nothing) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grads) override;
  std::string name() const override { return name_; }
  void release_saved() override {
    if (!saves_nothing_) fn_ = nullptr;
  }

 private:
  std::string name_;
  Backward fn_;
  bool saves_nothing_;
};

/// The edge gradient for `t` flows into: its grad_fn, or (for a leaf) its AccumulateGrad.
Edge gradient_edge(const Tensor& t);

/// Records `outputs` as produced by a FunctionNode named `name` from `inputs`; `backward` maps
/// the outputs' gradients (undefined = zero) to one gradient per input (undefined = none).
/// `saves_nothing`: `backward` captures no saved tensor (see FunctionNode).
void record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            FunctionNode::Backward backward, bool saves_nothing = false);

/// Sums `grad` down to `shape` (undoing broadcasting).
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace kiln::autograd
