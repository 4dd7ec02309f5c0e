// torch.nn.functional.pad: constant (negative pads crop), reflect, replicate and circular
// padding of the last dims, built from cat, narrow and index_select so that every backend has
// it and its gradient comes from those primitives.
#include <algorithm>
#include <string>
#include <vector>

#include "core/ops.h"

namespace kiln {
namespace {

/// The source position of each output position along a dim of size n padded by (before, after).
Tensor pad_index(int64_t n, int64_t before, int64_t after, PadMode mode, Device device) {
  std::vector<int64_t> idx;
  for (int64_t o = -before; o < n + after; ++o) {
    int64_t i = o;
    if (mode == PadMode::reflect) {
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
    } else if (mode == PadMode::replicate) {
      i = std::clamp<int64_t>(i, 0, n - 1);
    } else {  // circular
      i = ((i % n) + n) % n;
    }
    idx.push_back(i);
  }
  return tensor(idx).to(device);
}

const char* mode_name(PadMode m) {
  switch (m) {
    case PadMode::constant: return "constant";
    case PadMode::reflect: return "reflect";
    case PadMode::replicate: return "replicate";
    case PadMode::circular: return "circular";
  }
  return "?";
}

}  // namespace

Tensor pad(const Tensor& x, const IntList& pads, PadMode mode, double value) {
  KILN_CHECK(pads.size() % 2 == 0 && static_cast<int64_t>(pads.size()) / 2 <= x.dim(),
             "pad: {} pad values for a tensor of shape {} (two per padded dim, last dim first)", pads.size(),
             x.sizes());
  Tensor out = x;
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    const int64_t d = x.dim() - 1 - static_cast<int64_t>(k);
    const int64_t before = pads[2 * k], after = pads[2 * k + 1];
    const int64_t n = out.size(d);
    if (before == 0 && after == 0) continue;
    if (mode == PadMode::constant) {
      KILN_CHECK(n + before + after >= 0, "pad: pads ({}, {}) would give dim {} (size {}) a negative size", before,
                 after, d, n);
      // Negative pads crop; positive ones add blocks of `value`.
      out = out.narrow(d, std::max<int64_t>(0, -before), n + std::min<int64_t>(0, before) + std::min<int64_t>(0, after));
      std::vector<Tensor> parts;
      auto block = [&](int64_t size) {
        Shape s = out.sizes();
        s[d] = size;
        return full(s, value, TensorOptions(out.dtype()).device(out.device()));
      };
      if (before > 0) parts.push_back(block(before));
      parts.push_back(out);
      if (after > 0) parts.push_back(block(after));
      if (parts.size() > 1) out = cat(parts, d);
      continue;
    }
    KILN_CHECK(before >= 0 && after >= 0, "pad: {} padding needs non-negative pads, got ({}, {}) for dim {}",
               mode_name(mode), before, after, d);
    if (mode == PadMode::reflect)
      KILN_CHECK(before < n && after < n,
                 "pad: reflect padding ({}, {}) must be smaller than the padded dim {} (size {})", before, after, d, n);
    else
      KILN_CHECK(n > 0 && (mode != PadMode::circular || (before <= n && after <= n)),
                 "pad: {} padding ({}, {}) does not fit dim {} of size {}", mode_name(mode), before, after, d, n);
    out = out.index_select(d, pad_index(n, before, after, mode, out.device()));
  }
  return out.is_same(x) ? x.clone() : out;
}

}  // namespace kiln
