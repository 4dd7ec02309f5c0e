// Parameter initialisation schemes (torch.nn.init). Each fills a tensor in place without
// recording autograd and returns it; fans are computed as PyTorch does (dim 1 x receptive field
// for fan_in, dim 0 x receptive field for fan_out).
#pragma once

#include <string>
#include <utility>

#include "core/ops.h"

namespace kiln::nn::init {

enum class FanMode { fan_in, fan_out };

/// (fan_in, fan_out) of a weight with at least 2 dims; throws naming the shape otherwise.
std::pair<int64_t, int64_t> fans(const Tensor& t);
/// The recommended gain for a nonlinearity: "linear", "sigmoid", "tanh", "relu", "leaky_relu"
/// (with `param` as the negative slope), "selu".
double calculate_gain(const std::string& nonlinearity, double param = 0.01);

Tensor& uniform_(Tensor& t, double low = 0.0, double high = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0);
Tensor& xavier_normal_(Tensor& t, double gain = 1.0);
/// `a` is the negative slope of the rectifier after this layer (leaky_relu).
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                         const std::string& nonlinearity = "leaky_relu");
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, FanMode mode = FanMode::fan_in,
                        const std::string& nonlinearity = "leaky_relu");

}  // namespace kiln::nn::init
