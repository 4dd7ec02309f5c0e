#include "autograd/node.h"

#include <atomic>
#include <vector>

#include "core/grad_mode.h"
#include "core/op.h"
#include "core/print.h"
#include "core/view_history.h"
#include "core/ops.h"

namespace kiln::autograd {
namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};

// Lets a printed tensor name its grad_fn ("grad_fn=<mulBackward>").
detail::Registrar g_namer([] { set_grad_fn_namer([](const Node& n) { return n.name(); }); });
}  // namespace

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

Node::~Node() {
  // Children whose last owner is this node would be destroyed recursively; instead they are
  // parked on a per-thread list that the outermost destructor drains.
  thread_local std::vector<std::shared_ptr<Node>> pending;
  thread_local bool draining = false;
  for (Edge& e : next_edges_)
    if (e.fn) pending.push_back(std::move(e.fn));
  if (draining) return;
  draining = true;
  while (!pending.empty()) {
    std::shared_ptr<Node> n = std::move(pending.back());
    pending.pop_back();
  }
  draining = false;
}

Tensor SavedTensor::unpack(const char* op) const {
  if (!data_.defined()) return data_;
  KILN_CHECK(data_.version() == version_,
             "{}: a tensor of shape {} saved for backward was modified by an in-place operation "
             "(version {} when saved, {} now); clone() it before modifying it",
             op, data_.sizes(), version_, data_.version());
  return data_;
}

void Node::add_output(const Tensor& out) {
  outputs_.push_back(out.impl_ptr());
  auto& hooks = out.mutable_autograd_meta().grad_hooks;
  if (!hooks) hooks = std::make_shared<HookList>();
  hooks_.push_back(hooks);
}

void Node::set_next_edges(const std::vector<Tensor>& inputs) {
  next_edges_.clear();
  input_metas_.clear();
  for (const Tensor& t : inputs) {
    next_edges_.push_back(t.defined() && t.requires_grad() ? gradient_edge(t) : Edge{});
    if (t.defined()) input_metas_.push_back({t.sizes(), t.dtype(), t.device()});
    else input_metas_.push_back({{}, kFloat32, kCPU});
  }
}

Edge gradient_edge(const Tensor& t) {
  detail::refresh_view_history(t);
  AutogradMeta& m = t.mutable_autograd_meta();
  if (m.grad_fn) return Edge{m.grad_fn, m.output_nr};
  std::shared_ptr<Node> acc = m.grad_accumulator.lock();
  if (!acc) {
    auto a = std::make_shared<AccumulateGrad>(t);
    a->set_next_edges({});
    a->add_output(t);
    acc = a;
    m.grad_accumulator = acc;
  }
  return Edge{acc, 0};
}

namespace {

/// Whether `g` is the only way to reach its memory: no other tensor holds it, its storage, or
/// (for a view without history, such as mm's result squeezed out of bmm's [1, m, n]) the base it
/// was viewed from.
bool sole_owner(const Tensor& g) {
  const TensorImpl* i = g.unsafe_impl();
  if (g.impl_ptr().use_count() != 1) return false;
  if (i->view_base == nullptr) return g.storage().use_count() == 1;
  const TensorImpl* base = i->view_base.get();
  return i->autograd == nullptr && i->view_base.use_count() == 1 && base->view_base == nullptr &&
         base->autograd == nullptr && base->storage == i->storage && g.storage().use_count() == 2;
}

/// `g` as a tensor of its own (not a view), sharing its memory; `g` is dropped.
Tensor owned_alias(Tensor& g) {
  if (g.unsafe_impl()->view_base == nullptr) return std::move(g);
  const TensorImpl* i = g.unsafe_impl();
  Tensor t(std::make_shared<TensorImpl>(i->storage, i->sizes, i->strides, i->offset, i->dtype));
  g = Tensor();
  return t;
}

}  // namespace

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grads) {
  std::shared_ptr<TensorImpl> impl = leaf_.lock();
  if (!impl || !grads[0].defined()) return {};
  Tensor leaf(impl);
  AutogradMeta& m = leaf.mutable_autograd_meta();
  Tensor g = std::move(grads[0]);
  if (!m.grad.defined()) {
    // Steal the incoming buffer when nobody else holds it; otherwise keep a private copy so a
    // later in-place accumulation cannot write into someone else's tensor.
    m.grad = sole_owner(g) && g.is_contiguous() ? owned_alias(g) : g.clone();
  } else {
    m.grad.add_(g);
  }
  for (auto& hook : m.post_accumulate_hooks) hook(leaf);
  return {};
}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>&& grads) {
  KILN_CHECK(fn_ != nullptr,
             "{}: trying to backward through the graph a second time (its saved tensors were freed "
             "after the first backward); pass retain_graph=true to the first backward",
             name_);
  return fn_(grads);
}

void record(const char* name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            FunctionNode::Backward backward, bool saves_nothing) {
  auto node = std::make_shared<FunctionNode>(name, std::move(backward), saves_nothing);
  node->set_next_edges(inputs);
  uint32_t nr = 0;
  for (const Tensor& out : outputs) {
    AutogradMeta& m = out.mutable_autograd_meta();
    m.grad_fn = node;
    m.output_nr = nr++;
    node->add_output(out);
  }
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.sizes() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  IntList dims;
  for (int64_t i = 0; i < grad.dim(); ++i)
    if (i < lead || (shape[i - lead] == 1 && grad.size(i) != 1)) dims.push_back(i);
  Tensor r = dims.empty() ? grad : grad.sum(dims, /*keepdim=*/true);
  return r.reshape(shape);
}

}  // namespace kiln::autograd
