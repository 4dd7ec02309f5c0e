#include "autograd/gradcheck.h"

#include <cmath>

#include "core/grad_mode.h"
#include "core/ops.h"

namespace kiln::autograd {

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions opts) {
  for (const Tensor& x : inputs) {
    if (!x.defined() || !x.requires_grad()) continue;
    KILN_CHECK(x.dtype() == kFloat64 && x.is_contiguous() && x.is_leaf(),
               "gradcheck: inputs that require grad must be contiguous f64 leaves (got {} of shape {})", x.dtype(),
               x.sizes());
  }
  Tensor out = fn(inputs);
  KILN_CHECK(out.dtype() == kFloat64, "gradcheck: the function must return f64, got {}", out.dtype());
  const int64_t n_out = out.numel();
  const Shape out_shape = out.sizes();

  // Analytical Jacobian, one row per output element (a backward with a one-hot seed).
  std::vector<std::vector<std::vector<double>>> analytical(inputs.size());  // [input][out][elem]
  for (int64_t j = 0; j < n_out; ++j) {
    for (const Tensor& x : inputs)
      if (x.defined() && x.requires_grad()) const_cast<Tensor&>(x).set_grad(Tensor());
    Tensor seed = zeros(out_shape, kFloat64);
    seed.data_ptr<double>()[j] = 1.0;
    if (out.requires_grad()) out.backward(seed, /*retain_graph=*/true);
    for (size_t k = 0; k < inputs.size(); ++k) {
      const Tensor& x = inputs[k];
      if (!x.defined() || !x.requires_grad()) continue;
      Tensor g = x.grad();
      analytical[k].push_back(g.defined() ? g.to_vector<double>() : std::vector<double>(x.numel(), 0.0));
    }
  }
  for (const Tensor& x : inputs)
    if (x.defined() && x.requires_grad()) const_cast<Tensor&>(x).set_grad(Tensor());

  // Numerical Jacobian, one column per input element.
  GradcheckResult result;
  NoGradGuard no_grad;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    double* p = x.data_ptr<double>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double orig = p[i];
      p[i] = orig + opts.eps;
      std::vector<double> plus = fn(inputs).to_vector<double>();
      p[i] = orig - opts.eps;
      std::vector<double> minus = fn(inputs).to_vector<double>();
      p[i] = orig;
      for (int64_t j = 0; j < n_out; ++j) {
        double num = (plus[j] - minus[j]) / (2 * opts.eps);
        double ana = analytical[k][j][i];
        double err = std::fabs(num - ana);
        result.max_abs_error = std::max(result.max_abs_error, err);
        if (result.ok && !(err <= opts.atol + opts.rtol * std::fabs(num))) {
          result.ok = false;
          result.message = fmt::format(
              "gradcheck: input {} element {} / output element {}: analytical {} vs numerical {}", k, i, j, ana,
              num);
        }
      }
    }
  }
  return result;
}

}  // namespace kiln::autograd
