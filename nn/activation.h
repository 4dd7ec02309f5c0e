// Activation layers and Dropout: thin modules over the elementwise ops.
#pragma once

#include "nn/functional.h"
#include "nn/module.h"

namespace kiln::nn {

#define KILN_ACTIVATION_MODULE_(NAME, EXPR)                        \
  class NAME : public Module {                                     \
   public:                                                         \
    NAME() : Module(#NAME) {}                                      \
    Tensor forward(const Tensor& x) override { return EXPR; }      \
  };

KILN_ACTIVATION_MODULE_(ReLU, x.relu())
KILN_ACTIVATION_MODULE_(GELU, x.gelu())
KILN_ACTIVATION_MODULE_(SiLU, x.silu())
KILN_ACTIVATION_MODULE_(Tanh, x.tanh())
KILN_ACTIVATION_MODULE_(Sigmoid, x.sigmoid())
KILN_ACTIVATION_MODULE_(Identity, x)
#undef KILN_ACTIVATION_MODULE_

/// Zeroes each element with probability p while training (scaling the rest by 1/(1-p)).
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5) : Module("Dropout"), p_(p) {
    KILN_CHECK(p >= 0 && p <= 1, "Dropout: probability must be in [0, 1], got {}", p);
  }
  Tensor forward(const Tensor& x) override { return functional::dropout(x, p_, is_training()); }
  std::string extra_repr() const override { return fmt::format("p={}", p_); }

 private:
  double p_;
};

}  // namespace kiln::nn
