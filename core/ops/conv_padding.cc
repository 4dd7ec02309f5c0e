// conv2d with PyTorch's string padding: "valid" (none) and "same" (the output keeps the input's
// size at stride 1; an odd total padding puts the extra row/column at the bottom/right, as
// PyTorch does, by padding the input explicitly).
#include <string_view>

#include "core/conv.h"
#include "core/ops.h"

namespace kiln {

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const IntList& stride, const char* padding,
              const IntList& dilation, int64_t groups) {
  const std::string_view mode = padding == nullptr ? "" : padding;
  if (mode == "valid") return conv2d(x, w, bias, stride, {0, 0}, dilation, groups);
  KILN_CHECK(mode == "same", "conv2d: padding must be \"same\", \"valid\" or sizes, got \"{}\"", mode);
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
