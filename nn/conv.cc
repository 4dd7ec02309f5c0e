#include "nn/conv.h"

#include <cmath>

#include "nn/init.h"

namespace kiln::nn {

Conv2d::Conv2d(int64_t in, int64_t out, const Size2d& kernel_size, Conv2dOptions opts)
    : Module("Conv2d"), in_channels(in), out_channels(out), options(std::move(opts)) {
  const IntList& kernel = kernel_size;
  KILN_CHECK(in > 0 && out > 0, "Conv2d: channel counts must be positive, got {} and {}", in, out);
  KILN_CHECK(options.groups > 0 && in % options.groups == 0 && out % options.groups == 0,
             "Conv2d: groups={} must divide in_channels={} and out_channels={}", options.groups, in, out);
  KILN_CHECK(kernel.size() == 1 || kernel.size() == 2, "Conv2d: kernel_size must have 1 or 2 values, got {}", kernel);
  if (!options.padding_mode_str.empty()) parse_conv_padding(options.padding_mode_str, "Conv2d");
  const int64_t kh = kernel[0], kw = kernel.size() == 2 ? kernel[1] : kernel[0];
  weight = register_parameter("weight", empty({out, in / options.groups, kh, kw}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (options.bias) {
    bias = register_parameter("bias", empty({out}));
    double bound = 1.0 / std::sqrt(static_cast<double>(init::fans(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  if (!options.padding_mode_str.empty())
    return conv2d(x, weight, bias, options.stride, parse_conv_padding(options.padding_mode_str, "Conv2d"),
                  options.dilation, options.groups);
  return conv2d(x, weight, bias, options.stride, options.padding, options.dilation, options.groups);
}

std::string Conv2d::extra_repr() const {
  return fmt::format("{}, {}, kernel_size=({}, {}), stride={}, padding={}", in_channels, out_channels, weight.size(2),
                     weight.size(3), options.stride.list(), options.padding.list());
}

ConvTranspose2d::ConvTranspose2d(int64_t in, int64_t out, const Size2d& kernel_size, ConvTranspose2dOptions opts)
    : Module("ConvTranspose2d"), in_channels(in), out_channels(out), options(std::move(opts)) {
  const IntList& kernel = kernel_size;
  KILN_CHECK(in > 0 && out > 0, "ConvTranspose2d: channel counts must be positive, got {} and {}", in, out);
  KILN_CHECK(options.groups > 0 && in % options.groups == 0 && out % options.groups == 0,
             "ConvTranspose2d: groups={} must divide in_channels={} and out_channels={}", options.groups, in, out);
  KILN_CHECK(kernel.size() == 1 || kernel.size() == 2, "ConvTranspose2d: kernel_size must have 1 or 2 values, got {}",
             kernel);
  const int64_t kh = kernel[0], kw = kernel.size() == 2 ? kernel[1] : kernel[0];
  weight = register_parameter("weight", empty({in, out / options.groups, kh, kw}));
  // PyTorch's init: fan_in is computed from dim 1 of this weight (out / groups * kh * kw).
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (options.bias) {
    bias = register_parameter("bias", empty({out}));
    double bound = 1.0 / std::sqrt(static_cast<double>(init::fans(weight).first));
    init::uniform_(bias, -bound, bound);
  }
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
