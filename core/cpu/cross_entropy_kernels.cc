// CPU fused cross-entropy over [N, C] rows (core/kernels.h has the contract). Each row takes a
// numerically stable logsumexp (max subtracted before exp); the backward recomputes
// exp(x - lse) from the forward's lse instead of storing softmax. Rows are split across
// threads; f16/bf16 compute in f32 (through a converted copy), f32 and f64 natively. f32 rows
// use core/cpu/vec8.h: the forward reads a row from memory once (its max, and its sum for label
// smoothing), then sums exp(x - max) over it in cache; the backward is one pass.
#include <Eigen/Core>

#include <cmath>
#include <limits>
#include <type_traits>

#include "core/cpu/vec8.h"
#include "core/dense.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

template <class T> using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
template <class T> using CMap = Eigen::Map<const Arr<T>>;
template <class T> using MMap = Eigen::Map<Arr<T>>;

DType compute_dtype(DType t) {
  KILN_CHECK(is_floating(t), "cross_entropy: dtype {} is not supported (floating types only)", t);
  return t == kFloat64 ? kFloat64 : kFloat32;
}

/// Every target is a class in [0, C) or ignore_index; checked before any work so a bad label
/// fails with its value rather than reading past the row.
void check_targets(const Tensor& target, int64_t C, int64_t ignore_index) {
  const int64_t* t = target.data_ptr<int64_t>();
  for (int64_t i = 0; i < target.numel(); ++i)
    KILN_CHECK(t[i] == ignore_index || (t[i] >= 0 && t[i] < C),
               "cross_entropy: target {} (row {}) is out of range for {} classes (valid: 0..{}, or ignore_index {})",
               t[i], i, C, C - 1, ignore_index);
}

int64_t row_grain(int64_t C) { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(C, 1)); }

/// An f32 row's logsumexp, and the sum of its elements when `sum` is not null.
float logsumexp_row_f32(const float* x, int64_t C, float* sum) {
  using namespace vec;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t body = C - C % kW, tail = C - body;
  F8 m0 = splat(kNegInf), m1 = m0, a0 = splat(0.0f), a1 = a0;
  int64_t j = 0;
  for (; j + 2 * kW <= body; j += 2 * kW) {
    const F8 v0 = load(x + j), v1 = load(x + j + kW);
    m0 = vec::max(m0, v0);
    m1 = vec::max(m1, v1);
    if (sum) {
      a0 += v0;
      a1 += v1;
    }
  }
  for (; j < body; j += kW) {
    const F8 v = load(x + j);
    m0 = vec::max(m0, v);
    if (sum) a0 += v;
  }
  if (tail) {
    m0 = vec::max(m0, load_tail(x + body, tail, kNegInf));
    if (sum) a0 += load_tail(x + body, tail, 0.0f);
  }
  if (sum) *sum = hsum(a0 + a1);
  const float m = hmax(vec::max(m0, m1));
  // An all -inf row has lse -inf (as log_softmax): keep m out of the exp then.
  const F8 shift = splat(std::isfinite(m) ? m : 0.0f);
  F8 e = splat(0.0f);
  for (j = 0; j < body; j += kW) {
    __builtin_prefetch(x + C + j, 0);  // the next row streams in while this one computes in cache
    e += vec::exp(load(x + j) - shift);
  }
  if (tail) e += vec::exp(load_tail(x + body, tail, kNegInf) - shift);
  return shift[0] + std::log(hsum(e));
}

template <class T>
void forward_typed(T* loss, T* lse, const T* x, const int64_t* target, int64_t N, int64_t C, int64_t ignore_index,
                   double smoothing) {
  const T s = static_cast<T>(smoothing);
  parallel_for(0, N, row_grain(C), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      if constexpr (std::is_same_v<T, float>) {
        float row_sum = 0;
        const float l = logsumexp_row_f32(x + i * C, C, s != 0.0f ? &row_sum : nullptr);
        lse[i] = l;
        const int64_t t = target[i];
        if (t == ignore_index) {
          loss[i] = 0;
          continue;
        }
        float v = l - (1.0f - s) * x[i * C + t];
        if (s != 0.0f) v -= s * (row_sum / static_cast<float>(C));
        loss[i] = v;
        continue;
      }
      CMap<T> xr(x + i * C, C);
      const T m = xr.maxCoeff();
      // An all -inf row has lse -inf (as log_softmax): keep m out of the exp then.
      const T shift = std::isfinite(m) ? m : T(0);
      const T l = shift + std::log((xr - shift).exp().sum());
      lse[i] = l;
      const int64_t t = target[i];
      if (t == ignore_index) {
        loss[i] = 0;
        continue;
      }
      T v = l - (T(1) - s) * xr[t];
      if (s != T(0)) v -= s * xr.mean();
      loss[i] = v;
    }
  });
}

template <class T>
void backward_typed(T* gx, const T* g, const T* x, const T* lse, const int64_t* target, int64_t N, int64_t C,
                    int64_t ignore_index, double smoothing) {
  const T s = static_cast<T>(smoothing), uniform = s / static_cast<T>(C);
  parallel_for(0, N, row_grain(C), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      MMap<T> out(gx + i * C, C);
      const int64_t t = target[i];
      if (t == ignore_index) {
        out.setZero();
        continue;
      }
      const T gi = g[i];
      if constexpr (std::is_same_v<T, float>) {
        using namespace vec;
        const float* xr = x + i * C;
        float* o = gx + i * C;
        const F8 lv = splat(lse[i]), uv = splat(uniform), gv = splat(gi);
        const int64_t body = C - C % kW;
        for (int64_t j = 0; j < body; j += kW) store(o + j, (vec::exp(load(xr + j) - lv) - uv) * gv);
        if (body < C) store_tail(o + body, (vec::exp(load_tail(xr + body, C - body, 0.0f) - lv) - uv) * gv, C - body);
      } else {
        out = ((CMap<T>(x + i * C, C) - lse[i]).exp() - uniform) * gi;
      }
      out[t] -= (T(1) - s) * gi;
    }
  });
}

void cross_entropy_kernel(Tensor& loss, Tensor& lse, const Tensor& logits, const Tensor& target,
                          int64_t ignore_index, double label_smoothing) {
  const int64_t N = logits.size(0), C = logits.size(1);
  if (N == 0) return;
  const DType cd = compute_dtype(logits.dtype());
  const Tensor tc = dense_as(target, kInt64);
  check_targets(tc, C, ignore_index);
  const Tensor xc = dense_as(logits, cd);
  const bool direct = loss.is_contiguous() && lse.is_contiguous() && loss.dtype() == cd && lse.dtype() == cd;
  Tensor lo = direct ? loss : make_tensor({N}, cd, loss.device());
  Tensor ls = direct ? lse : make_tensor({N}, cd, lse.device());
  if (cd == kFloat64)
    forward_typed(lo.data_ptr<double>(), ls.data_ptr<double>(), xc.data_ptr<double>(), tc.data_ptr<int64_t>(), N, C,
                  ignore_index, label_smoothing);
  else
    forward_typed(lo.data_ptr<float>(), ls.data_ptr<float>(), xc.data_ptr<float>(), tc.data_ptr<int64_t>(), N, C,
                  ignore_index, label_smoothing);
  if (!direct) {
    kernels::copy[loss.device()](loss, lo);
    kernels::copy[lse.device()](lse, ls);
  }
}

void cross_entropy_backward_kernel(Tensor& grad_logits, const Tensor& grad_loss, const Tensor& logits,
                                   const Tensor& lse, const Tensor& target, int64_t ignore_index,
                                   double label_smoothing) {
  const int64_t N = logits.size(0), C = logits.size(1);
  if (N == 0 || C == 0) return;
  KILN_CHECK(grad_logits.sizes() == logits.sizes() && grad_loss.numel() == N && lse.numel() == N,
             "cross_entropy_backward: shapes differ (grad_logits {}, grad_loss {}, logits {}, lse {})",
             grad_logits.sizes(), grad_loss.sizes(), logits.sizes(), lse.sizes());
  const DType cd = compute_dtype(logits.dtype());
  const Tensor tc = dense_as(target, kInt64);
  check_targets(tc, C, ignore_index);
  const Tensor xc = dense_as(logits, cd), gc = dense_as(grad_loss, cd), lc = dense_as(lse, cd);
  const bool direct = grad_logits.is_contiguous() && grad_logits.dtype() == cd;
  Tensor oc = direct ? grad_logits : make_tensor(grad_logits.sizes(), cd, grad_logits.device());
  if (cd == kFloat64)
    backward_typed(oc.data_ptr<double>(), gc.data_ptr<double>(), xc.data_ptr<double>(), lc.data_ptr<double>(),
                   tc.data_ptr<int64_t>(), N, C, ignore_index, label_smoothing);
  else
    backward_typed(oc.data_ptr<float>(), gc.data_ptr<float>(), xc.data_ptr<float>(), lc.data_ptr<float>(),
                   tc.data_ptr<int64_t>(), N, C, ignore_index, label_smoothing);
  if (!direct) kernels::copy[grad_logits.device()](grad_logits, oc);
}

}  // namespace

KILN_REGISTER_KERNEL(cross_entropy, DeviceType::CPU, &cross_entropy_kernel);
KILN_REGISTER_KERNEL(cross_entropy_backward, DeviceType::CPU, &cross_entropy_backward_kernel);

}  // namespace kiln::cpu
