// scaled-dot-product attention as one primitive: argument checks, the [B..., H, T, D] -> [B, H, T, D]
// views the kernels take, and the dispatch to the device kernel (core/ops/attention.h).
#include "core/ops/attention.h"

#include <cmath>

#include "core/dense.h"
#include "core/error.h"
#include "core/generator.h"
#include "core/kernels.h"
#include "core/op_table.h"
#include "core/ops.h"

namespace kiln {
namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

Shape lead_of(const Tensor& x) { return Shape(x.sizes().begin(), x.sizes().end() - 2); }

std::pair<int64_t, int64_t> split_lead(const Shape& lead) {
  if (lead.empty()) return {1, 1};
  int64_t b = 1;
  for (size_t i = 0; i + 1 < lead.size(); ++i) b *= lead[i];
  return {b, lead.back()};
}

void check_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, const AttentionParams& p) {
  KILN_CHECK(q.defined() && k.defined() && v.defined(), "{}: q, k and v must be defined", kOp);
  KILN_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(),
             "{}: q, k, v must have the same rank >= 2, got {}, {}, {}", kOp, q.shape(), k.shape(), v.shape());
  KILN_CHECK(is_floating(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(),
             "{}: q, k, v must share one floating dtype, got {}, {}, {}", kOp, q.dtype(), k.dtype(), v.dtype());
  KILN_CHECK(k.device() == q.device() && v.device() == q.device(), "{}: q, k, v on different devices: {}, {}, {}",
             kOp, q.device(), k.device(), v.device());
  KILN_CHECK(lead_of(k) == lead_of(q) && lead_of(v) == lead_of(q),
             "{}: q, k, v must have the same leading (batch, head) dims, got {}, {}, {}", kOp, q.shape(), k.shape(),
             v.shape());
  KILN_CHECK(q.size(-1) == k.size(-1), "{}: q's last dim {} != k's {}", kOp, q.size(-1), k.size(-1));
  KILN_CHECK(k.size(-2) == v.size(-2), "{}: k has {} keys but v has {} values", kOp, k.size(-2), v.size(-2));
  KILN_CHECK(std::isfinite(p.scale), "{}: scale must be finite, got {}", kOp, p.scale);
  KILN_CHECK(p.dropout_p >= 0.0 && p.dropout_p < 1.0, "{}: dropout_p must be in [0, 1), got {}", kOp, p.dropout_p);
  if (!mask.defined()) return;
  KILN_CHECK(!p.causal, "{}: give causal=true or attn_mask, not both (as PyTorch)", kOp);
  KILN_CHECK(mask.dtype() == kBool || is_floating(mask.dtype()),
             "{}: attn_mask must be bool or floating, got {}", kOp, mask.dtype());
  KILN_CHECK(mask.device() == q.device(), "{}: attn_mask is on {} but q is on {}", kOp, mask.device(), q.device());
  Shape full = lead_of(q);
  full.push_back(q.size(-2));
  full.push_back(k.size(-2));
  bool ok = mask.dim() <= static_cast<int64_t>(full.size());
  for (int64_t i = 1; ok && i <= mask.dim(); ++i) {
    const int64_t m = mask.size(-i), f = full[full.size() - i];
    ok = m == 1 || m == f;
  }
  KILN_CHECK(ok, "{}: attn_mask shape {} does not broadcast to {}", kOp, mask.shape(), full);
}

Tensor attention_forward_only(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                              const AttentionParams& p) {
  return std::get<0>(attention_with_lse(q, k, v, mask, p));
}

}  // namespace

Tensor attention_4d(const Tensor& x) {
  const auto [b, h] = split_lead(lead_of(x));
  // Rows whose elements are adjacent and that do not overlap, as a GEMM reads them; anything else
  // (a transposed last dim, keys expanded along T) is copied.
  const int64_t t = x.size(-2), d = x.size(-1);
  const bool rows_ok = (d == 1 || x.stride(-1) == 1) && (t == 1 || x.stride(-2) >= d);
  return (rows_ok ? x : dense(x)).reshape({b, h, t, d});  // merging the leading dims copies only if it must
}

Tensor attention_output(const Shape& lead, int64_t T, int64_t D, DType dtype, Device device) {
  Shape shape = lead;
  shape.push_back(T);
  shape.push_back(D);
  if (lead.empty()) return make_tensor(shape, dtype, device);
  Shape layout = shape;  // [..., H, T, D] laid out as [..., T, H, D]
  std::swap(layout[lead.size() - 1], layout[lead.size()]);
  const int64_t n = static_cast<int64_t>(shape.size());
  return make_tensor(layout, dtype, device).transpose(n - 3, n - 2);
}

Tensor attention_mask_4d(const Tensor& mask, const Shape& lead, int64_t Tq, int64_t Tk, DType dtype) {
  if (!mask.defined()) return mask;
  Tensor m = mask.dtype() == kBool || mask.dtype() == dtype ? mask : mask.to(dtype);
  Shape full = lead;
  full.push_back(Tq);
  full.push_back(Tk);
  while (m.dim() < static_cast<int64_t>(full.size())) m = m.unsqueeze(0);
  const auto [b, h] = split_lead(lead);
  return m.expand(full).reshape({b, h, Tq, Tk});
}

std::tuple<Tensor, Tensor> attention_with_lse(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                                              const AttentionParams& p) {
  check_args(q, k, v, mask, p);
  const Shape lead = lead_of(q);
  const int64_t Tq = q.size(-2), Tk = k.size(-2), Dv = v.size(-1);
  Shape lse_shape = lead;
  lse_shape.push_back(Tq);
  Tensor out = attention_output(lead, Tq, Dv, q.dtype(), q.device());
  Tensor lse = make_tensor(lse_shape, q.dtype() == kFloat64 ? kFloat64 : kFloat32, q.device());
  if (out.numel() == 0) return {out, lse};
  const auto [b, h] = split_lead(lead);
  Tensor out4 = out.reshape({b, h, Tq, Dv}), lse3 = lse.reshape({b, h, Tq});
  KILN_CHECK(out4.data_ptr() == out.data_ptr(), "{}: internal: the output's [B, H, T, D] view is a copy", kOp);
  kernels::attention_forward[q.device()](out4, lse3, attention_4d(q), attention_4d(k), attention_4d(v),
                                         attention_mask_4d(mask, lead, Tq, Tk, q.dtype()), p);
  return {out, lse};
}

Tensor attention_dropout_keep_mask(const AttentionParams& p, int64_t B, int64_t H, int64_t Tq, int64_t Tk) {
  Tensor keep = make_tensor({B, H, Tq, Tk}, kBool, kCPU);
  bool* d = keep.data_ptr<bool>();
  const uint32_t thr = attention_dropout_threshold(p.dropout_p);
  const int64_t n = keep.numel();
  for (int64_t e = 0; e < n; ++e) d[e] = philox4x32(p.seed, p.offset + static_cast<uint64_t>(e) / 4)[e % 4] >= thr;
  return keep;
}

}  // namespace kiln

KILN_DEFINE_OP(attention, kiln::attention_forward_only)
