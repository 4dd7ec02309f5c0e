// Activation layers and Dropout: thin modules over the elementwise ops.
#pragma once

#include <string>
#include <utility>

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
KILN_ACTIVATION_MODULE_(SiLU, x.silu())
KILN_ACTIVATION_MODULE_(Tanh, x.tanh())
KILN_ACTIVATION_MODULE_(Sigmoid, x.sigmoid())
KILN_ACTIVATION_MODULE_(Identity, x)
KILN_ACTIVATION_MODULE_(Hardswish, functional::hardswish(x))
#undef KILN_ACTIVATION_MODULE_

/// GELU, exact (approximate = "none") or with the tanh approximation ("tanh", GPT-2's).
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none") : Module("GELU"), approximate_(std::move(approximate)) {
    KILN_CHECK(approximate_ == "none" || approximate_ == "tanh",
               "GELU: approximate must be \"none\" or \"tanh\", got \"{}\"", approximate_);
  }
  Tensor forward(const Tensor& x) override { return functional::gelu(x, approximate_); }
  std::string extra_repr() const override { return fmt::format("approximate='{}'", approximate_); }

 private:
  std::string approximate_;
};

/// log(1 + exp(beta x)) / beta, linear where beta x > threshold.
class Softplus : public Module {
 public:
  explicit Softplus(double beta = 1, double threshold = 20) : Module("Softplus"), beta_(beta), threshold_(threshold) {}
  Tensor forward(const Tensor& x) override { return functional::softplus(x, beta_, threshold_); }
  std::string extra_repr() const override { return fmt::format("beta={}, threshold={}", beta_, threshold_); }

 private:
  double beta_, threshold_;
};

/// A module over functional::FN(x, PARAM) with one named double parameter.
#define KILN_ACTIVATION_MODULE_1_(NAME, FN, PARAM, DEFAULT)                                      \
  class NAME : public Module {                                                                   \
   public:                                                                                       \
    explicit NAME(double PARAM = DEFAULT) : Module(#NAME), PARAM##_(PARAM) {}                    \
    Tensor forward(const Tensor& x) override { return functional::FN(x, PARAM##_); }            \
    std::string extra_repr() const override { return fmt::format(#PARAM "={}", PARAM##_); }      \
                                                                                                 \
   private:                                                                                      \
    double PARAM##_;                                                                             \
  };

KILN_ACTIVATION_MODULE_1_(LeakyReLU, leaky_relu, negative_slope, 0.01)
KILN_ACTIVATION_MODULE_1_(ELU, elu, alpha, 1)
#undef KILN_ACTIVATION_MODULE_1_

class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1, double max_val = 1) : Module("Hardtanh"), min_(min_val), max_(max_val) {
    KILN_CHECK(min_val <= max_val, "Hardtanh: min_val {} cannot be greater than max_val {}", min_val, max_val);
  }
  Tensor forward(const Tensor& x) override { return functional::hardtanh(x, min_, max_); }
  std::string extra_repr() const override { return fmt::format("min_val={}, max_val={}", min_, max_); }

 private:
  double min_, max_;
};

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
