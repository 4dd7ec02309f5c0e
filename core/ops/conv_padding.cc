// conv2d with PyTorch's string padding: "valid" (none) and "same" (the output keeps the input's
// size at stride 1; an odd total padding puts the extra row/column at the bottom/right, as
// PyTorch does, by padding the input explicitly).
#include <string>

#include "core/conv.h"
#include "core/ops.h"

namespace kiln {

ConvPadding parse_conv_padding(const std::string& s, const char* op) {
  if (s == "same") return ConvPadding::same;
  KILN_CHECK(s == "valid", "{}: padding must be \"same\", \"valid\" or sizes, got \"{}\"", op, s);
  return ConvPadding::valid;
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const IntList& stride, ConvPadding padding,
              const IntList& dilation, int64_t groups) {
  if (padding == ConvPadding::valid) return conv2d(x, w, bias, stride, {0, 0}, dilation, groups);
  const Conv2dParams p = make_conv2d_params(stride, {0, 0}, dilation, groups);
  KILN_CHECK(p.stride[0] == 1 && p.stride[1] == 1, "conv2d: padding=\"same\" needs stride 1, got {}", stride);
  KILN_CHECK(w.dim() == 4, "conv2d: weight must be [Cout, Cin / groups, KH, KW], got shape {}", w.sizes());
  int64_t lo[2], hi[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t total = p.dilation[i] * (w.size(2 + i) - 1);
    lo[i] = total / 2;
    hi[i] = total - lo[i];
  }
  if (lo[0] == hi[0] && lo[1] == hi[1]) return conv2d(x, w, bias, stride, {lo[0], lo[1]}, dilation, groups);
  Tensor padded = pad(x, {lo[1], hi[1], lo[0], hi[0]});
  return conv2d(padded, w, bias, stride, {0, 0}, dilation, groups);
}

}  // namespace kiln
