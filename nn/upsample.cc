// torch.nn.functional.interpolate for NCHW tensors, nearest and bilinear (align_corners either
// way), as separable index_select + lerp passes over H then W: composed of primitives, so every
// backend has it and its gradient (a scatter-add of the weights) comes from index_select's.
#include <algorithm>
#include <cmath>

#include "nn/functional.h"

namespace kiln::nn::functional {
namespace {

struct Axis {
  std::vector<int64_t> i0, i1;
  std::vector<double> w1;  // weight of i1 (bilinear); i0 gets 1 - w1
};

/// Source positions for `out` samples of an axis of `in`; `scale` is the user's factor (0: none).
Axis sample_axis(int64_t in, int64_t out, double scale, InterpolateMode mode, bool align_corners) {
  Axis a;
  // PyTorch: a given scale factor is used as is (1 / scale); otherwise in / out.
  const double ratio = scale > 0 ? 1.0 / scale : static_cast<double>(in) / static_cast<double>(out);
  for (int64_t o = 0; o < out; ++o) {
    if (mode == InterpolateMode::nearest) {
      a.i0.push_back(std::min<int64_t>(static_cast<int64_t>(std::floor(o * ratio)), in - 1));
      continue;
    }
    double src = align_corners ? (out > 1 ? o * static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0)
                               : std::max(0.0, (o + 0.5) * ratio - 0.5);
    const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(std::floor(src)), in - 1);
    a.i0.push_back(i0);
    a.i1.push_back(std::min<int64_t>(i0 + 1, in - 1));
    a.w1.push_back(src - static_cast<double>(i0));
  }
  return a;
}

Tensor resample(const Tensor& x, int64_t dim, const Axis& a) {
  const Device dev = x.device();
  Tensor lo = x.index_select(dim, tensor(a.i0).to(dev));
  if (a.i1.empty()) return lo;
  Shape wshape(x.dim(), 1);
  wshape[dim] = static_cast<int64_t>(a.w1.size());
  Tensor w1 = tensor(a.w1, wshape).to(dev, x.dtype());
  Tensor hi = x.index_select(dim, tensor(a.i1).to(dev));
  return lo + (hi - lo) * w1;
}

}  // namespace

Tensor interpolate(const Tensor& x, const IntList& size, const std::vector<double>& scale_factor, InterpolateMode mode,
                   bool align_corners) {
  KILN_CHECK(x.dim() == 4, "interpolate: expected an NCHW input, got shape {}", x.sizes());
  KILN_CHECK(size.empty() != scale_factor.empty(), "interpolate: give exactly one of size and scale_factor");
  KILN_CHECK(!(align_corners && mode == InterpolateMode::nearest),
             "interpolate: align_corners applies to bilinear mode only");
  const int64_t h = x.size(2), w = x.size(3);
  double sh = 0, sw = 0;
  int64_t oh, ow;
  if (!size.empty()) {
    KILN_CHECK(size.size() == 1 || size.size() == 2, "interpolate: size needs 1 or 2 values, got {}", size);
    oh = size[0];
    ow = size.size() == 2 ? size[1] : size[0];
  } else {
    KILN_CHECK(scale_factor.size() == 1 || scale_factor.size() == 2, "interpolate: scale_factor needs 1 or 2 values");
    sh = scale_factor[0];
    sw = scale_factor.size() == 2 ? scale_factor[1] : scale_factor[0];
    KILN_CHECK(sh > 0 && sw > 0, "interpolate: scale factors must be positive, got {} and {}", sh, sw);
    oh = static_cast<int64_t>(std::floor(h * sh));
    ow = static_cast<int64_t>(std::floor(w * sw));
  }
  KILN_CHECK(oh > 0 && ow > 0 && h > 0 && w > 0, "interpolate: input {} and output size ({}, {}) must be non-empty",
             x.sizes(), oh, ow);
  Tensor y = resample(x, 2, sample_axis(h, oh, sh, mode, align_corners));
  return resample(y, 3, sample_axis(w, ow, sw, mode, align_corners));
}

}  // namespace kiln::nn::functional
