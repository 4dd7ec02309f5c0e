#include "nn/init.h"

#include <cmath>

#include "core/grad_mode.h"
#include "core/kernels.h"

namespace kiln::nn::init {

std::pair<int64_t, int64_t> fans(const Tensor& t) {
  KILN_CHECK(t.dim() >= 2, "init: fan in/out need a tensor with at least 2 dims, got shape {}", t.sizes());
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

double calculate_gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "sigmoid" || nl == "conv2d" || nl == "conv1d") return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nl == "selu") return 3.0 / 4.0;
  fail("calculate_gain: unknown nonlinearity '{}'", nl);
}

// Initialisation is not part of the model's computation: the fills run without recording.
Tensor& uniform_(Tensor& t, double low, double high, Generator* gen) {
  NoGradGuard g;
  return t.uniform_(low, high, gen);
}
Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  NoGradGuard g;
  return t.normal_(mean, std, gen);
}

Tensor& constant_(Tensor& t, double value) {
  NoGradGuard g;
  return t.fill_(value);
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

Tensor& xavier_uniform_(Tensor& t, double gain) {
  auto [fan_in, fan_out] = fans(t);
  double a = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return uniform_(t, -a, a);
}

Tensor& xavier_normal_(Tensor& t, double gain) {
  auto [fan_in, fan_out] = fans(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
}

static double kaiming_std(const Tensor& t, double a, FanMode mode, const std::string& nl) {
  auto [fan_in, fan_out] = fans(t);
  double fan = static_cast<double>(mode == FanMode::fan_in ? fan_in : fan_out);
  return calculate_gain(nl, a) / std::sqrt(fan);
}

Tensor& kaiming_uniform_(Tensor& t, double a, FanMode mode, const std::string& nl) {
  double bound = std::sqrt(3.0) * kaiming_std(t, a, mode, nl);
  return uniform_(t, -bound, bound);
}

Tensor& kaiming_normal_(Tensor& t, double a, FanMode mode, const std::string& nl) {
  return normal_(t, 0.0, kaiming_std(t, a, mode, nl));
}

}  // namespace kiln::nn::init
