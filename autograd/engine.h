// The backward pass: walks the tape from the roots in reverse without recursion.
#pragma once

#include <functional>
#include <vector>

#include "core/tensor.h"

namespace kiln::autograd {

/// Runs backward from `roots` seeded with `grad_roots` (an undefined seed means ones for a
/// one-element root). Accumulates into leaf .grad and fires hooks; frees saved tensors unless
/// `retain_graph`. Runs with grad mode off (no higher-order graphs).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {},
              bool retain_graph = false);

/// Runs `fn` on this thread once the backward pass now running has walked the whole graph,
/// before `backward()` returns (what data parallel uses to wait for its last reductions).
/// Callbacks run in the order queued; one that throws makes `backward()` throw. Valid only from
/// inside a backward pass (a hook); elsewhere it throws.
void queue_callback(std::function<void()> fn);

}  // namespace kiln::autograd
