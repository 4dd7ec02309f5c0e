// The autograd state a tensor carries. It lives in `core` so a Tensor can hold it, but only
// `autograd/` gives it meaning (core never looks inside a Node).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace kiln::autograd {
class Node;
}

namespace kiln {

struct AutogradMeta {
  bool requires_grad = false;                 // set on leaves by the user
  bool retains_grad = false;                  // a non-leaf that keeps its .grad (retain_grad())
  Tensor grad;                                // accumulated gradient
  std::shared_ptr<autograd::Node> grad_fn;    // the node that produced this tensor (non-leaves)
  uint32_t output_nr = 0;                     // which output of grad_fn this tensor is
  std::weak_ptr<autograd::Node> grad_accumulator;  // a leaf's AccumulateGrad node, shared by uses
  /// Per-tensor hooks: see the incoming gradient, may return a replacement (or an undefined
  /// tensor to keep it), in registration order. Shared with the producing node, so hooks
  /// outlive a temporary tensor they were registered on (as in PyTorch).
  std::shared_ptr<std::vector<std::function<Tensor(const Tensor&)>>> grad_hooks;
  /// Per-leaf hooks run after the gradient was accumulated into `.grad` (DDP's trigger).
  std::vector<std::function<void(const Tensor&)>> post_accumulate_hooks;
};

}  // namespace kiln
