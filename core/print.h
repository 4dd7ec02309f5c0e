// Printing tensors (Tensor::str, operator<<) and the one hook autograd/ needs so a printout can
// name a tensor's grad_fn: core never looks inside an autograd::Node itself.
#pragma once

#include <string>

#include "core/tensor.h"

namespace kiln {

/// Returns the display name of a node ("MulBackward"); set once by autograd/.
using GradFnNamer = std::string (*)(const autograd::Node& node);
void set_grad_fn_namer(GradFnNamer namer);

}  // namespace kiln
