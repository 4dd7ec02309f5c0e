// conv_transpose2d as a composition: the input spread out by the stride (zeros between its
// pixels, written through a strided view, which autograd follows), padded by dil * (k - 1) - pad,
// then convolved with the kernel flipped and its in/out channels swapped. That is exactly the
// adjoint of conv2d with respect to its input (the test checks it against conv2d's gradient).
#include "core/conv.h"
#include "nn/functional.h"

namespace kiln::nn::functional {

Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& bias, const IntList& stride,
                        const IntList& padding, const IntList& output_padding, int64_t groups,
                        const IntList& dilation) {
  KILN_CHECK(x.dim() == 4 && w.dim() == 4, "conv_transpose2d: expected x [N, Cin, H, W] and w [Cin, Cout/groups, KH, KW], "
             "got shapes {} and {}", x.sizes(), w.sizes());
  KILN_CHECK(groups > 0 && w.size(0) == x.size(1) && x.size(1) % groups == 0,
             "conv_transpose2d: weight shape {} does not fit {} input channels in {} groups", w.sizes(), x.size(1), groups);
  const Conv2dParams p = make_conv2d_params(stride, padding, dilation, groups, "conv_transpose2d");
  const Conv2dParams op = make_conv2d_params(output_padding, {0, 0}, {1, 1}, 1, "conv_transpose2d");
  int64_t out_pad[2];
  for (int i = 0; i < 2; ++i) {
    out_pad[i] = output_padding.size() == 1 ? output_padding[0] : op.stride[i];
    KILN_CHECK(out_pad[i] >= 0 && out_pad[i] < std::max(p.stride[i], p.dilation[i]),
               "conv_transpose2d: output_padding {} must be smaller than stride or dilation", output_padding);
  }
  // Spread: [N, C, (H - 1) * sh + 1, (W - 1) * sw + 1] with x at every stride-th pixel.
  Tensor z = x;
  if (p.stride[0] > 1 || p.stride[1] > 1) {
    z = zeros({x.size(0), x.size(1), (x.size(2) - 1) * p.stride[0] + 1, (x.size(3) - 1) * p.stride[1] + 1},
              TensorOptions(x.dtype()).device(x.device()));
    Tensor holes = z.slice(2, 0, z.size(2), p.stride[0]).slice(3, 0, z.size(3), p.stride[1]);
    holes.copy_(x);
  }
  const int64_t kh = w.size(2), kw = w.size(3);
  const int64_t ph = p.dilation[0] * (kh - 1) - p.padding[0], pw = p.dilation[1] * (kw - 1) - p.padding[1];
  z = kiln::pad(z, {pw, pw + out_pad[1], ph, ph + out_pad[0]});
  // [Cin, Cout/g, kh, kw] -> flipped, [Cout, Cin/g, kh, kw].
  const int64_t cin = w.size(0), cout_g = w.size(1);
  Tensor wt = w.flip({2, 3})
                  .reshape({groups, cin / groups, cout_g, kh, kw})
                  .transpose(1, 2)
                  .reshape({groups * cout_g, cin / groups, kh, kw});
  return conv2d(z, wt, bias, {1, 1}, {0, 0}, {p.dilation[0], p.dilation[1]}, groups);
}

}  // namespace kiln::nn::functional
