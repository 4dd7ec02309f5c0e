// Convolution and pooling: the conv2d, max_pool2d and avg_pool2d primitives (validation, output
// shapes, kernel dispatch; autograd/functions/conv.cc holds their backward) and the public
// functions of core/conv.h. Inputs are made contiguous here so kernels see plain NCHW. Under
// autocast conv2d runs in the lower precision (core/autocast_policy.h).
#include <algorithm>
#include <string>

#include "core/autocast.h"
#include "core/conv.h"
#include "core/kernels.h"
#include "core/op_table.h"
#include "core/ops.h"

namespace kiln {
namespace {

/// A (height, width) pair from a list of one or two values.
void to_pair(const IntList& v, int64_t out[2], const char* op, const char* what) {
  KILN_CHECK(v.size() == 1 || v.size() == 2, "{}: {} must have 1 or 2 values (height, width), got {}", op, what, v);
  out[0] = v[0];
  out[1] = v.size() == 2 ? v[1] : v[0];
}

void check_input_4d(const Tensor& x, const char* op) {
  KILN_CHECK(x.defined(), "{}: input is an undefined tensor", op);
  KILN_CHECK(x.dim() == 4, "{}: expected a 4-D input [N, C, H, W], got shape {}", op, x.sizes());
  KILN_CHECK(is_floating(x.dtype()), "{}: dtype {} is not supported (floating types only)", op, x.dtype());
}

Tensor as_contiguous(const Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

Shape conv2d_output_shape(const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  Shape out{x.size(0), w.size(0), 0, 0};
  for (int d = 0; d < 2; ++d) {
    const int64_t in = x.size(2 + d) + 2 * p.padding[d];
    const int64_t k = p.dilation[d] * (w.size(2 + d) - 1) + 1;
    KILN_CHECK(in >= k,
               "conv2d: padded input size ({} x {}) is smaller than the (dilated) kernel size ({} x {}); input "
               "shape {}, weight shape {}, padding ({}, {}), dilation ({}, {})",
               x.size(2) + 2 * p.padding[0], x.size(3) + 2 * p.padding[1], p.dilation[0] * (w.size(2) - 1) + 1,
               p.dilation[1] * (w.size(3) - 1) + 1, x.sizes(), w.sizes(), p.padding[0], p.padding[1],
               p.dilation[0], p.dilation[1]);
    out[2 + d] = (in - k) / p.stride[d] + 1;
  }
  return out;
}

void check_conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  check_input_4d(x, "conv2d");
  KILN_CHECK(w.defined(), "conv2d: weight is an undefined tensor");
  KILN_CHECK(w.dim() == 4, "conv2d: expected a 4-D weight [Cout, Cin / groups, KH, KW], got shape {}", w.sizes());
  KILN_CHECK(x.dtype() == w.dtype(), "conv2d: input dtype {} and weight dtype {} differ", x.dtype(), w.dtype());
  KILN_CHECK(x.device() == w.device(), "conv2d: input is on {} but weight is on {}", x.device(), w.device());
  for (int d = 0; d < 2; ++d) {
    KILN_CHECK(p.stride[d] > 0, "conv2d: stride must be positive, got ({}, {})", p.stride[0], p.stride[1]);
    KILN_CHECK(p.padding[d] >= 0, "conv2d: padding must be non-negative, got ({}, {})", p.padding[0], p.padding[1]);
    KILN_CHECK(p.dilation[d] > 0, "conv2d: dilation must be positive, got ({}, {})", p.dilation[0], p.dilation[1]);
  }
  KILN_CHECK(p.groups > 0, "conv2d: groups must be positive, got {}", p.groups);
  KILN_CHECK(w.size(0) > 0 && w.size(0) % p.groups == 0,
             "conv2d: weight of shape {} has {} output channels, which is not a positive multiple of groups={}",
             w.sizes(), w.size(0), p.groups);
  KILN_CHECK(x.size(1) == w.size(1) * p.groups,
             "conv2d: given groups={} and weight of shape {}, expected input of shape {} to have {} channels, "
             "but it has {}",
             p.groups, w.sizes(), x.sizes(), w.size(1) * p.groups, x.size(1));
  if (bias.defined()) {
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0),
               "conv2d: expected bias of shape [{}] (one per output channel of weight {}), got {}", w.size(0),
               w.sizes(), bias.sizes());
    KILN_CHECK(bias.dtype() == x.dtype(), "conv2d: bias dtype {} differs from input dtype {}", bias.dtype(),
               x.dtype());
    KILN_CHECK(bias.device() == x.device(), "conv2d: bias is on {} but input is on {}", bias.device(), x.device());
  }
}

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  check_conv2d(x, w, bias, p);
  Tensor out = make_tensor(conv2d_output_shape(x, w, p), x.dtype(), x.device());
  if (out.numel() == 0) return out;
  kernels::conv2d[x.device()](out, as_contiguous(x), as_contiguous(w),
                              bias.defined() ? as_contiguous(bias) : Tensor(), p);
  return out;
}

Shape pool2d_output_shape(const Tensor& x, const Pool2dParams& p, const char* op) {
  check_input_4d(x, op);
  for (int d = 0; d < 2; ++d) {
    KILN_CHECK(p.kernel[d] > 0, "{}: kernel size must be positive, got ({}, {})", op, p.kernel[0], p.kernel[1]);
    KILN_CHECK(p.stride[d] > 0, "{}: stride must be positive, got ({}, {})", op, p.stride[0], p.stride[1]);
    KILN_CHECK(p.dilation[d] > 0, "{}: dilation must be positive, got ({}, {})", op, p.dilation[0], p.dilation[1]);
    KILN_CHECK(p.padding[d] >= 0 && p.padding[d] * 2 <= p.dilation[d] * (p.kernel[d] - 1) + 1,
               "{}: padding should be non-negative and at most half of the effective kernel size, got padding "
               "({}, {}) for kernel ({}, {}) and dilation ({}, {})",
               op, p.padding[0], p.padding[1], p.kernel[0], p.kernel[1], p.dilation[0], p.dilation[1]);
  }
  Shape out{x.size(0), x.size(1), 0, 0};
  for (int d = 0; d < 2; ++d) {
    out[2 + d] = pool_output_size(x.size(2 + d), p.kernel[d], p.padding[d], p.stride[d], p.dilation[d], p.ceil_mode);
  }
  KILN_CHECK(out[2] > 0 && out[3] > 0,
             "{}: output size {} x {} is too small for input of shape {} with kernel ({}, {}), stride ({}, {}), "
             "padding ({}, {})",
             op, out[2], out[3], x.sizes(), p.kernel[0], p.kernel[1], p.stride[0], p.stride[1], p.padding[0],
             p.padding[1]);
  return out;
}

Tensor max_pool2d_forward(const Tensor& x, const Pool2dParams& p) { return std::get<0>(max_pool2d_with_indices(x, p)); }

Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& p) {
  Tensor out = make_tensor(pool2d_output_shape(x, p, "avg_pool2d"), x.dtype(), x.device());
  if (out.numel() > 0) kernels::avg_pool2d[x.device()](out, as_contiguous(x), p);
  return out;
}

}  // namespace
}  // namespace kiln

KILN_DEFINE_OP(conv2d, &kiln::conv2d_forward)
KILN_DEFINE_OP(max_pool2d, &kiln::max_pool2d_forward)
KILN_DEFINE_OP(avg_pool2d, &kiln::avg_pool2d_forward)

namespace kiln {

int64_t pool_output_size(int64_t in, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation, bool ceil_mode) {
  const int64_t num = in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  // Floor division (rounds toward -inf), as PyTorch's div_rtn.
  int64_t q = num / stride;
  if (num % stride != 0 && num < 0) --q;
  int64_t out = q + 1;
  // The last window must start inside the input or its left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

Conv2dParams make_conv2d_params(const IntList& stride, const IntList& padding, const IntList& dilation,
                                int64_t groups, const char* op) {
  Conv2dParams p;
  to_pair(stride, p.stride, op, "stride");
  to_pair(padding, p.padding, op, "padding");
  to_pair(dilation, p.dilation, op, "dilation");
  p.groups = groups;
  return p;
}

Pool2dParams make_pool2d_params(const IntList& kernel, const IntList& stride, const IntList& padding,
                                bool ceil_mode, bool count_include_pad, const char* op, const IntList& dilation) {
  Pool2dParams p;
  to_pair(kernel, p.kernel, op, "kernel_size");
  to_pair(stride.empty() ? kernel : stride, p.stride, op, "stride");
  to_pair(padding, p.padding, op, "padding");
  to_pair(dilation, p.dilation, op, "dilation");
  p.ceil_mode = ceil_mode;
  p.count_include_pad = count_include_pad;
  return p;
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const IntList& stride, const IntList& padding,
              const IntList& dilation, int64_t groups) {
  auto low = [](const Tensor& t) { return autocast::cast_input(AutocastOp::conv2d, t); };
  return op::conv2d(low(x), low(w), low(bias), make_conv2d_params(stride, padding, dilation, groups));
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const Pool2dParams& p) {
  const Shape s = pool2d_output_shape(x, p, "max_pool2d");
  Tensor out = make_tensor(s, x.dtype(), x.device());
  Tensor indices = make_tensor(s, kInt64, x.device());
  if (out.numel() > 0) kernels::max_pool2d[x.device()](out, indices, as_contiguous(x.detach()), p);
  return {out, indices};
}

Tensor max_pool2d(const Tensor& x, const IntList& kernel, const IntList& stride, const IntList& padding,
                  const IntList& dilation, bool ceil_mode) {
  return op::max_pool2d(x, make_pool2d_params(kernel, stride, padding, ceil_mode, true, "max_pool2d", dilation));
}

Tensor avg_pool2d(const Tensor& x, const IntList& kernel, const IntList& stride, const IntList& padding,
                  bool ceil_mode, bool count_include_pad) {
  return op::avg_pool2d(x, make_pool2d_params(kernel, stride, padding, ceil_mode, count_include_pad, "avg_pool2d"));
}

Tensor adaptive_avg_pool2d(const Tensor& x, const IntList& output_size) {
  check_input_4d(x, "adaptive_avg_pool2d");
  int64_t os[2];
  to_pair(output_size, os, "adaptive_avg_pool2d", "output_size");
  const int64_t in[2] = {x.size(2), x.size(3)};
  for (int d = 0; d < 2; ++d) {
    if (os[d] == -1) os[d] = in[d];
    KILN_CHECK(os[d] > 0, "adaptive_avg_pool2d: output size must be positive, got {} for input of shape {}",
               output_size, x.sizes());
    KILN_CHECK(in[d] > 0, "adaptive_avg_pool2d: input of shape {} has an empty spatial dim", x.sizes());
  }
  if (in[0] % os[0] == 0 && in[1] % os[1] == 0) {
    // Equal, non-overlapping windows: one avg_pool2d.
    const int64_t k0 = in[0] / os[0], k1 = in[1] / os[1];
    return avg_pool2d(x, {k0, k1}, {k0, k1});
  }
  // Windows of unequal sizes. A window is a product of a row range and a column range, so its
  // mean is a mean over columns followed by a mean over rows: oh + ow narrow/mean pieces, and
  // the gradient comes from those primitives.
  auto pool_dim = [](const Tensor& t, int64_t dim, int64_t in_size, int64_t out_size) {
    if (in_size == out_size) return t;
    std::vector<Tensor> parts;
    parts.reserve(out_size);
    for (int64_t i = 0; i < out_size; ++i) {
      const int64_t start = (i * in_size) / out_size;
      const int64_t end = ((i + 1) * in_size + out_size - 1) / out_size;
      parts.push_back(t.narrow(dim, start, end - start).mean({dim}, /*keepdim=*/true));
    }
    return cat(parts, dim);
  };
  return pool_dim(pool_dim(x, 3, in[1], os[1]), 2, in[0], os[0]);
}

}  // namespace kiln
