#include "nn/conv.h"

#include <cmath>

#include "nn/init.h"

namespace kiln::nn {

namespace {

/// Checks a conv layer's channels, groups and kernel size (naming `type`), then registers its
/// weight [d0, d1 / groups... as given by `weight_shape(kh, kw)`] and bias [out] with PyTorch's
/// default init: kaiming_uniform(a=sqrt(5)) weights, U(+-1/sqrt(fan_in)) bias.
template <class WeightShape>
void init_conv_layer(Module& m, Tensor& weight, Tensor& bias, const char* type, int64_t in, int64_t out,
                     int64_t groups, const IntList& kernel, bool with_bias, WeightShape weight_shape) {
  KILN_CHECK(in > 0 && out > 0, "{}: channel counts must be positive, got {} and {}", type, in, out);
  KILN_CHECK(groups > 0 && in % groups == 0 && out % groups == 0,
             "{}: groups={} must divide in_channels={} and out_channels={}", type, groups, in, out);
  KILN_CHECK(kernel.size() == 1 || kernel.size() == 2, "{}: kernel_size must have 1 or 2 values, got {}", type,
             kernel);
  const int64_t kh = kernel[0], kw = kernel.size() == 2 ? kernel[1] : kernel[0];
  weight = m.register_parameter("weight", empty(weight_shape(kh, kw)));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (with_bias) {
    bias = m.register_parameter("bias", empty({out}));
    double bound = 1.0 / std::sqrt(static_cast<double>(init::fans(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}

}  // namespace

Conv2d::Conv2d(int64_t in, int64_t out, const Size2d& kernel_size, Conv2dOptions opts)
    : Module("Conv2d"), in_channels(in), out_channels(out), options(std::move(opts)) {
  if (!options.padding_mode_str.empty()) string_padding_ = parse_conv_padding(options.padding_mode_str, "Conv2d");
  init_conv_layer(*this, weight, bias, "Conv2d", in, out, options.groups, kernel_size, options.bias,
                  [&](int64_t kh, int64_t kw) { return Shape{out, in / options.groups, kh, kw}; });
}

Tensor Conv2d::forward(const Tensor& x) {
  if (string_padding_) return conv2d(x, weight, bias, options.stride, *string_padding_, options.dilation, options.groups);
  return conv2d(x, weight, bias, options.stride, options.padding, options.dilation, options.groups);
}

std::string Conv2d::extra_repr() const {
  return fmt::format("{}, {}, kernel_size=({}, {}), stride={}, padding={}", in_channels, out_channels, weight.size(2),
                     weight.size(3), options.stride.list(), options.padding.list());
}

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, const Size2d& kernel_size, ConvTranspose2dOptions opts)
    : Module("ConvTranspose2d"), in_channels(in), out_channels(out), options(std::move(opts)) {
  // As PyTorch, fan_in comes from dim 1 of this weight (out / groups * kh * kw).
  init_conv_layer(*this, weight, bias, "ConvTranspose2d", in, out, options.groups, kernel_size, options.bias,
                  [&](int64_t kh, int64_t kw) { return Shape{in, out / options.groups, kh, kw}; });
}

Tensor ConvTranspose2d::forward(const Tensor& x) {
  return functional::conv_transpose2d(x, weight, bias, options.stride, options.padding, options.output_padding,
                                      options.groups, options.dilation);
}

std::string ConvTranspose2d::extra_repr() const {
  return fmt::format("{}, {}, kernel_size=({}, {}), stride={}, padding={}", in_channels, out_channels, weight.size(2),
                     weight.size(3), options.stride.list(), options.padding.list());
}

}  // namespace kiln::nn
