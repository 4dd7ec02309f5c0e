// Reverse walk of the tape. Dependencies are counted first (an explicit stack, no recursion);
// then nodes run when every gradient they wait for has arrived, newest first (highest sequence
// number), so leaves are reached roughly in reverse order of their use — the order in which
// data parallel wants to start reducing their gradients.
#include "autograd/engine.h"

#include <atomic>
#include <queue>
#include <unordered_map>

#include "autograd/node.h"
#include "core/autocast.h"
#include "core/grad_mode.h"
#include "core/ops.h"

namespace kiln::autograd {

namespace detail {
// Called around each node's backward while //profiler records (profiler/autograd_hook.cc
// declares and sets it); null otherwise, so the walk pays one relaxed load per node. A global
// rather than a header API so that adding it recompiled nothing above autograd.
std::atomic<void (*)(const std::string& node_name, bool begin)> g_node_observer{nullptr};
}  // namespace detail

namespace {

struct ByNewest {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

/// Brings a gradient to what the edge's input expects: same dtype (mixed-precision ops hand
/// back their compute dtype) and device; a shape mismatch is a bug in a formula and says so.
Tensor conform(Tensor g, const InputMeta& meta, const Node& node, size_t i) {
  KILN_CHECK(g.sizes() == meta.shape, "backward of {}: gradient for input {} has shape {}, expected {}",
             node.name(), i, g.sizes(), meta.shape);
  if (g.device() != meta.device) g = g.to(meta.device);
  if (g.dtype() != meta.dtype) g = g.to(meta.dtype);
  return g;
}

Tensor accumulate(const Tensor& a, const Tensor& b) { return a.defined() ? a + b : b; }

// The callbacks of the backward pass running on this thread (null outside one).
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;

// Installs a callback list for one backward pass and restores the outer one (a hook may run a
// nested backward) even when the pass throws.
class CallbackScope {
 public:
  CallbackScope() : outer_(t_callbacks) { t_callbacks = &callbacks_; }
  ~CallbackScope() { t_callbacks = outer_; }
  void run() {
    for (size_t i = 0; i < callbacks_.size(); ++i) {
      auto fn = std::move(callbacks_[i]);  // a callback may queue more (and reallocate)
      fn();
    }
  }

 private:
  std::vector<std::function<void()>> callbacks_;
  std::vector<std::function<void()>>* outer_;
};

}  // namespace

void queue_callback(std::function<void()> fn) {
  KILN_CHECK(t_callbacks != nullptr, "queue_callback: called outside a backward pass");
  t_callbacks->push_back(std::move(fn));
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph) {
  KILN_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(),
             "backward: {} roots but {} gradients", roots.size(), grad_roots.size());
  NoGradGuard no_grad;
  // Formulas compute in the dtypes their forward saved, even when backward() is called inside
  // an autocast guard.
  autocast::SuspendGuard no_autocast;
  CallbackScope callbacks;

  // Seed the roots.
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<std::shared_ptr<Node>> root_nodes;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    KILN_CHECK(r.requires_grad(),
               "backward: tensor of shape {} does not require grad and has no grad_fn (did an input call "
               "set_requires_grad()?)",
               r.sizes());
    Tensor g = i < grad_roots.size() ? grad_roots[i] : Tensor();
    if (!g.defined()) {
      KILN_CHECK(r.numel() == 1,
                 "backward: a gradient can be implied only for one-element outputs; got shape {} "
                 "(pass a gradient)",
                 r.sizes());
      g = ones_like(r);
    }
    KILN_CHECK(g.sizes() == r.sizes(), "backward: gradient shape {} does not match output shape {}", g.sizes(),
               r.sizes());
    Edge e = gradient_edge(r);
    auto& buf = buffers[e.fn.get()];
    buf.resize(e.fn->num_outputs());
    buf[e.input_nr] = accumulate(buf[e.input_nr], g);
    root_nodes.push_back(e.fn);
  }

  // Count how many gradients each reachable node waits for.
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, bool> seen;
  std::vector<Node*> stack;
  for (auto& n : root_nodes)
    if (!seen[n.get()]) { seen[n.get()] = true; stack.push_back(n.get()); }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      ++deps[e.fn.get()];
      if (!seen[e.fn.get()]) { seen[e.fn.get()] = true; stack.push_back(e.fn.get()); }
    }
  }

  // Keep every node alive while we run (a released node's edges may hold the last reference).
  std::priority_queue<Node*, std::vector<Node*>, ByNewest> ready;
  for (auto& n : root_nodes)
    if (deps[n.get()] == 0) { ready.push(n.get()); deps[n.get()] = -1; }

  std::vector<std::shared_ptr<Node>> keep_alive(root_nodes);
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(buffers[node]);
    buffers.erase(node);
    grads.resize(node->num_outputs());

    // Per-tensor hooks and retained grads of the node's outputs.
    for (size_t i = 0; i < node->num_outputs(); ++i) {
      if (!grads[i].defined()) continue;
      for (auto& hook : node->hooks(i)) {
        Tensor replaced = hook(grads[i]);
        if (replaced.defined()) grads[i] = replaced;
      }
      std::shared_ptr<TensorImpl> out = node->output(i);
      if (out && out->autograd && out->autograd->retains_grad) {
        AutogradMeta& m = *out->autograd;
        m.grad = m.grad.defined() ? m.grad + grads[i] : grads[i].clone();
      }
    }

    // A node none of whose outputs received a gradient passes none on (zeros are implied).
    bool any_grad = false;
    for (const Tensor& g : grads) any_grad |= g.defined();
    auto* observe = detail::g_node_observer.load(std::memory_order_relaxed);
    if (observe != nullptr && any_grad) observe(node->name(), true);
    std::vector<Tensor> in_grads = any_grad ? node->apply(std::move(grads)) : std::vector<Tensor>{};
    if (observe != nullptr && any_grad) observe(node->name(), false);
    if (!retain_graph) node->release_saved();

    const auto& edges = node->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      Node* next = e.fn.get();
      if (i < in_grads.size() && in_grads[i].defined()) {
        auto& buf = buffers[next];
        buf.resize(next->num_outputs());
        buf[e.input_nr] = accumulate(buf[e.input_nr], conform(in_grads[i], node->input_metas()[i], *node, i));
      }
      if (--deps[next] == 0) {
        keep_alive.push_back(e.fn);
        ready.push(next);
      }
    }
  }
  callbacks.run();
}

}  // namespace kiln::autograd

namespace kiln {

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph);
}

}  // namespace kiln
