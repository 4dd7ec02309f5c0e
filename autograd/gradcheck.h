// Finite-difference gradient checking in f64, for users and for Kiln's own tests.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace kiln::autograd {

struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step
  double atol = 1e-5;
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  // the first mismatch: input, element, analytical vs numerical
};

/// Compares the Jacobian backward computes for `fn` with central differences, for every input
/// that requires grad (inputs must be contiguous f64). `fn` may return any shape.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions opts = {});

}  // namespace kiln::autograd
