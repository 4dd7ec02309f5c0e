// Rules for in-place ops (fill_, copy_, add_, masked_fill_, ...), PyTorch's: without autograd
// they write the tensor's storage directly and bump its version counter. Under autograd the op
// is computed out of place, its value written into the tensor, and the tensor takes the op's
// history; written through a view, the view's base takes it (CopySlices), so gradients flow
// through the written region into the operands and around it into the base's earlier history.
#pragma once

#include "core/tensor.h"

namespace kiln {

/// Throws naming `op` if `x` may not be written in place: a leaf requiring grad (or a view of
/// one) while grad mode is on, a view made in no-grad mode of a tensor that requires grad, or a
/// tensor whose elements overlap in memory (an expanded view).
void check_inplace(const Tensor& x, const char* op);

/// True when an in-place op on `x` must be recorded by autograd: grad mode is on and x (or, for
/// a view, its base) or `other` requires grad.
bool inplace_needs_grad(const Tensor& x, const Tensor& other);

/// The autograd half of an in-place op: writes `result` (the op's out-of-place value, computed
/// with autograd from a clone of self where the op reads self) into `self`, bumps the version
/// and gives self (or its base) the op's history.
void commit_inplace(Tensor& self, const Tensor& result, const char* op);

}  // namespace kiln
