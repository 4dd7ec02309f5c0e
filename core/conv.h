// Convolution and pooling over NCHW tensors, with PyTorch's names, defaults and output sizes.
// conv2d, max_pool2d and avg_pool2d are differentiable primitives (core/op_table.h);
// adaptive_avg_pool2d is built on them. Size arguments take one value (both dims) or two (h, w).
#pragma once

#include <string>
#include <tuple>

#include "core/op_kinds.h"
#include "core/tensor.h"

namespace kiln {

/// torch.nn.functional.conv2d: x [N, Cin, H, W], w [Cout, Cin / groups, KH, KW], bias [Cout]
/// or undefined. Output [N, Cout, OH, OW] with OH = (H + 2 pad - dil (KH - 1) - 1) / stride + 1.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias = {}, const IntList& stride = {1, 1},
              const IntList& padding = {0, 0}, const IntList& dilation = {1, 1}, int64_t groups = 1);

/// PyTorch's string paddings: "same" (stride 1; the output keeps the input's size) and "valid"
/// (no padding). An enum, so that a braced `{0}` can only mean sizes.
enum class ConvPadding { same, valid };
/// conv2d with padding "same" or "valid"; `parse_conv_padding` reads the strings.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const IntList& stride, ConvPadding padding,
              const IntList& dilation = {1, 1}, int64_t groups = 1);
/// "same" / "valid" as ConvPadding; throws naming `op` and the string otherwise.
ConvPadding parse_conv_padding(const std::string& s, const char* op = "conv2d");

/// torch.nn.functional.max_pool2d, in its argument order; an empty stride means stride = kernel.
/// Padding is -inf; window elements are `dilation` apart.
Tensor max_pool2d(const Tensor& x, const IntList& kernel, const IntList& stride = {},
                  const IntList& padding = {0, 0}, const IntList& dilation = {1, 1}, bool ceil_mode = false);

/// max_pool2d's values and argmax indices (i64, flat h * W + w within each input plane), as
/// torch's return_indices=True. Not recorded by autograd: its own backward uses it.
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dParams& params);

/// torch.nn.functional.avg_pool2d; an empty stride means stride = kernel. Padding counts as
/// zeros in the divisor when count_include_pad.
Tensor avg_pool2d(const Tensor& x, const IntList& kernel, const IntList& stride = {},
                  const IntList& padding = {0, 0}, bool ceil_mode = false, bool count_include_pad = true);

/// torch.nn.functional.adaptive_avg_pool2d: output [N, C, oh, ow]; window i spans
/// [floor(i H / oh), ceil((i + 1) H / oh)). A size of -1 keeps the input's.
Tensor adaptive_avg_pool2d(const Tensor& x, const IntList& output_size);

/// The primitives' parameter structs from PyTorch-style lists (named `op` in errors).
Conv2dParams make_conv2d_params(const IntList& stride, const IntList& padding, const IntList& dilation,
                                int64_t groups, const char* op = "conv2d");
Pool2dParams make_pool2d_params(const IntList& kernel, const IntList& stride, const IntList& padding,
                                bool ceil_mode, bool count_include_pad, const char* op,
                                const IntList& dilation = {1, 1});

/// The output length of a pooling window sweep (PyTorch's pooling_output_shape).
int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode);

}  // namespace kiln
