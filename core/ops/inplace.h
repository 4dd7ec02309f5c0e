// Rules for in-place ops (fill_, copy_, add_, ...): they write the tensor's storage directly
// and bump its version counter. Under autograd they are refused on leaves that require grad and
// on views of tensors that require grad (PyTorch's rules); elsewhere the autograd-aware path of
// each op rebases the tensor's history onto the out-of-place result.
#pragma once

#include "core/tensor.h"

namespace kiln {

/// Throws naming `op` if `x` may not be written in place: a leaf requiring grad while grad mode
/// is on, or a tensor whose elements overlap in memory (an expanded view).
void check_inplace(const Tensor& x, const char* op);

/// True when an in-place op on `x` must be recorded by autograd (x or an operand requires grad
/// and grad mode is on).
bool inplace_needs_grad(const Tensor& x, const Tensor& other);

/// Makes `self` take the values and the autograd history of `result` (an out-of-place result
/// computed from a clone of self): the in-place op as seen by autograd.
void rebase_history(Tensor& self, const Tensor& result);

}  // namespace kiln
