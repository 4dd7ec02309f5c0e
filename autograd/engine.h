// The backward pass: walks the tape from the roots in reverse without recursion.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace kiln::autograd {

/// Runs backward from `roots` seeded with `grad_roots` (an undefined seed means ones for a
/// one-element root). Accumulates into leaf .grad and fires hooks; frees saved tensors unless
/// `retain_graph`. Runs with grad mode off (no higher-order graphs).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {},
              bool retain_graph = false);

}  // namespace kiln::autograd
