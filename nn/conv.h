// Conv2d, ConvTranspose2d, Upsample and the 2-D pooling layers over NCHW tensors. Kernel,
// stride, padding and dilation are Size2d: `3` or `{3, 5}`.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "core/conv.h"
#include "nn/functional.h"
#include "nn/module.h"
#include "nn/size2d.h"

namespace kiln::nn {

struct Conv2dOptions {
  Size2d stride = 1;
  Size2d padding = 0;
  /// "same" or "valid" (PyTorch's string padding); when set it replaces `padding`.
  std::string padding_mode_str;
  Size2d dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

/// PyTorch's default init: kaiming_uniform(a=sqrt(5)) weights, U(+-1/sqrt(fan_in)) bias.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, const Size2d& kernel_size, Conv2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Tensor weight, bias;
  const int64_t in_channels, out_channels;
  const Conv2dOptions options;

 private:
  std::optional<ConvPadding> string_padding_;  // options.padding_mode_str, parsed once
};

struct ConvTranspose2dOptions {
  Size2d stride = 1;
  Size2d padding = 0;
  Size2d output_padding = 0;
  Size2d dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

/// The adjoint of Conv2d (often called "deconvolution"): weight [Cin, Cout / groups, KH, KW],
/// output size (H - 1) * stride - 2 * padding + dilation * (KH - 1) + output_padding + 1.
class ConvTranspose2d : public Module {
 public:
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, const Size2d& kernel_size,
                  ConvTranspose2dOptions options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Tensor weight, bias;
  const int64_t in_channels, out_channels;
  const ConvTranspose2dOptions options;
};

/// torch.nn.Upsample: nearest or bilinear resizing of NCHW maps by a size or a scale factor.
class Upsample : public Module {
 public:
  struct Options {
    IntList size;                     // (h, w) or one value for both; or
    std::vector<double> scale_factor; // one or two factors
    functional::InterpolateMode mode = functional::InterpolateMode::nearest;
    bool align_corners = false;
  };
  explicit Upsample(Options options) : Module("Upsample"), options_(std::move(options)) {}
  Tensor forward(const Tensor& x) override {
    return functional::interpolate(x, options_.size, options_.scale_factor, options_.mode, options_.align_corners);
  }

 private:
  Options options_;
};

class MaxPool2d : public Module {
 public:
  /// (dilation comes last here, so that existing positional ceil_mode arguments keep their meaning)
  explicit MaxPool2d(Size2d kernel, Size2d stride = {}, Size2d padding = 0, bool ceil_mode = false,
                     Size2d dilation = 1)
      : Module("MaxPool2d"), kernel_(std::move(kernel)), stride_(std::move(stride)), padding_(std::move(padding)),
        dilation_(std::move(dilation)), ceil_mode_(ceil_mode) {}
  /// `({h, w})` alone: without this, the braces could also build a MaxPool2d(h, w) to move from.
  explicit MaxPool2d(std::initializer_list<int64_t> kernel) : MaxPool2d(Size2d(kernel)) {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, kernel_, stride_, padding_, dilation_, ceil_mode_); }
  std::string extra_repr() const override { return fmt::format("kernel_size={}, dilation={}", kernel_.list(), dilation_.list()); }

 private:
  Size2d kernel_, stride_, padding_, dilation_;
  bool ceil_mode_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Size2d kernel, Size2d stride = {}, Size2d padding = 0)
      : Module("AvgPool2d"), kernel_(std::move(kernel)), stride_(std::move(stride)), padding_(std::move(padding)) {}
  /// `({h, w})` alone (see MaxPool2d).
  explicit AvgPool2d(std::initializer_list<int64_t> kernel) : AvgPool2d(Size2d(kernel)) {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, kernel_, stride_, padding_); }
  std::string extra_repr() const override { return fmt::format("kernel_size={}", kernel_.list()); }

 private:
  Size2d kernel_, stride_, padding_;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2d output_size) : Module("AdaptiveAvgPool2d"), size_(std::move(output_size)) {}
  /// `({h, w})` alone (see MaxPool2d).
  explicit AdaptiveAvgPool2d(std::initializer_list<int64_t> output_size)
      : AdaptiveAvgPool2d(Size2d(output_size)) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, size_); }
  std::string extra_repr() const override { return fmt::format("output_size={}", size_.list()); }

 private:
  Size2d size_;
};

}  // namespace kiln::nn
