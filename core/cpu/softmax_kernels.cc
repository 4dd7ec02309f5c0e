// CPU softmax / log_softmax and their backward along one dim, numerically stable (the row's
// maximum is subtracted before exp). Work is laid out as [outer, D, inner] on contiguous data:
// inner == 1 (the last dim) runs row by row (f32 forward: core/cpu/vec8.h's exp, three passes
// over the row, two of them in cache; otherwise Eigen's vectorised exp); other dims process
// blocks of the inner dim together. Rows are split across threads. f16/bf16 compute in f32.
#include <Eigen/Core>

#include <algorithm>
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

constexpr int64_t kBlock = 64;  // inner positions processed together when the dim is not last

DType compute_dtype(DType t, const char* op) {
  KILN_CHECK(is_floating(t), "{}: dtype {} is not supported (floating types only)", op, t);
  return t == kFloat64 ? kFloat64 : kFloat32;
}

struct Dims {
  int64_t outer = 1, D = 1, inner = 1;
};

Dims split_at(const Shape& s, int64_t dim) {
  Dims d;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    if (i < dim) d.outer *= s[i];
    else if (i == dim) d.D = s[i];
    else d.inner *= s[i];
  }
  return d;
}

/// Runs f(outer, j0, len) over every (outer index, block of inner) in parallel.
template <class F> void for_each_block(const Dims& g, const F& f) {
  const int64_t bsz = g.inner == 1 ? 1 : kBlock;
  const int64_t nblk = (g.inner + bsz - 1) / bsz;
  const int64_t per_item = std::max<int64_t>(1, g.D * std::min(bsz, g.inner));
  parallel_for(0, g.outer * nblk, std::max<int64_t>(1, kGrainSize / per_item), [&](int64_t b, int64_t e) {
    for (int64_t it = b; it < e; ++it) {
      const int64_t o = it / nblk, j0 = (it % nblk) * bsz;
      f(o, j0, std::min(bsz, g.inner - j0));
    }
  });
}

/// One f32 row of D: its maximum (reading x from memory), then e^(x - max) summed (and stored
/// for softmax) while the row is in cache, then one scaling pass over y (softmax) or
/// y = x - logsumexp (log_softmax). The padded tail goes through the same vector code. The exp
/// pass prefetches the next row: without that, memory would idle while a row computes.
void softmax_row_f32(float* y, const float* x, int64_t D, bool log) {
  using namespace vec;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const int64_t body = D - D % kW;
  F8 m0 = splat(kNegInf), m1 = m0, m2 = m0, m3 = m0;
  int64_t j = 0;
  for (; j + 4 * kW <= body; j += 4 * kW) {
    m0 = vec::max(m0, load(x + j));
    m1 = vec::max(m1, load(x + j + kW));
    m2 = vec::max(m2, load(x + j + 2 * kW));
    m3 = vec::max(m3, load(x + j + 3 * kW));
  }
  for (; j < body; j += kW) m0 = vec::max(m0, load(x + j));
  if (body < D) m0 = vec::max(m0, load_tail(x + body, D - body, kNegInf));
  const float m = hmax(vec::max(vec::max(m0, m1), vec::max(m2, m3)));
  const F8 mv = splat(m);
  // One vector at a time: the exp has enough independent work to hide the adds' latency, and
  // unrolling it spilled registers.
  F8 s0 = splat(0.0f);
  for (j = 0; j < body; j += kW) {
    // The next row's x (and y, to be written) stream in while this one computes in cache.
    __builtin_prefetch(x + D + j, 0);
    __builtin_prefetch(y + D + j, 1);
    const F8 e = vec::exp(load(x + j) - mv);
    if (!log) store(y + j, e);
    s0 += e;
  }
  if (body < D) {
    const F8 e = vec::exp(load_tail(x + body, D - body, kNegInf) - mv);
    if (!log) store_tail(y + body, e, D - body);
    s0 += e;
  }
  const float s = hsum(s0);
  if (log) {
    const float shift = m + std::log(s);
    for (j = 0; j < D; ++j) y[j] = x[j] - shift;
  } else {
    const float inv = 1.0f / s;
    for (j = 0; j < D; ++j) y[j] *= inv;
  }
}

template <class T> void softmax_typed(T* y, const T* x, const Dims& g, bool log) {
  const int64_t D = g.D, I = g.inner;
  for_each_block(g, [&](int64_t o, int64_t j0, int64_t len) {
    if constexpr (std::is_same_v<T, float>) {
      if (I == 1) return softmax_row_f32(y + o * D, x + o * D, D, log);
    }
    if (I == 1) {
      CMap<T> xr(x + o * D, D);
      MMap<T> yr(y + o * D, D);
      const T m = xr.maxCoeff();
      if (log) {
        const T s = (xr - m).exp().sum();
        yr = xr - (m + std::log(s));
      } else {
        yr = (xr - m).exp();
        yr *= T(1) / yr.sum();
      }
      return;
    }
    T mbuf[kBlock], sbuf[kBlock];
    MMap<T> m(mbuf, len), s(sbuf, len);
    m.setConstant(-std::numeric_limits<T>::infinity());
    s.setZero();
    const T* xb = x + o * D * I + j0;
    T* yb = y + o * D * I + j0;
    for (int64_t d = 0; d < D; ++d) m = m.max(CMap<T>(xb + d * I, len));
    if (log) {
      for (int64_t d = 0; d < D; ++d) s += (CMap<T>(xb + d * I, len) - m).exp();
      m += s.log();
      for (int64_t d = 0; d < D; ++d) MMap<T>(yb + d * I, len) = CMap<T>(xb + d * I, len) - m;
    } else {
      for (int64_t d = 0; d < D; ++d) {
        MMap<T> yr(yb + d * I, len);
        yr = (CMap<T>(xb + d * I, len) - m).exp();
        s += yr;
      }
      s = s.inverse();
      for (int64_t d = 0; d < D; ++d) MMap<T>(yb + d * I, len) *= s;
    }
  });
}

// softmax:     gx = y * (g - sum(g * y))
// log_softmax: gx = g - exp(y) * sum(g)
template <class T> void softmax_backward_typed(T* gx, const T* gy, const T* y, const Dims& g, bool log) {
  const int64_t D = g.D, I = g.inner;
  for_each_block(g, [&](int64_t o, int64_t j0, int64_t len) {
    if (I == 1) {
      CMap<T> gr(gy + o * D, D), yr(y + o * D, D);
      MMap<T> out(gx + o * D, D);
      if (log) {
        const T s = gr.sum();
        out = gr - yr.exp() * s;
      } else {
        const T s = (gr * yr).sum();
        out = yr * (gr - s);
      }
      return;
    }
    T sbuf[kBlock];
    MMap<T> s(sbuf, len);
    s.setZero();
    const int64_t base = o * D * I + j0;
    for (int64_t d = 0; d < D; ++d) {
      CMap<T> gr(gy + base + d * I, len);
      if (log) s += gr;
      else s += gr * CMap<T>(y + base + d * I, len);
    }
    for (int64_t d = 0; d < D; ++d) {
      CMap<T> gr(gy + base + d * I, len), yr(y + base + d * I, len);
      MMap<T> out(gx + base + d * I, len);
      if (log) out = gr - yr.exp() * s;
      else out = yr * (gr - s);
    }
  });
}

void softmax_kernel(Tensor& out, const Tensor& x, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  if (out.numel() == 0) return;
  const DType cd = compute_dtype(x.dtype(), name);
  Tensor xc = dense_as(x, cd);
  const bool direct = out.is_contiguous() && out.dtype() == cd;
  Tensor oc = direct ? out : make_tensor(out.sizes(), cd, out.device());
  const Dims g = split_at(x.sizes(), x.dim() == 0 ? 0 : dim);
  if (cd == kFloat64) softmax_typed(oc.data_ptr<double>(), xc.data_ptr<double>(), g, log);
  else softmax_typed(oc.data_ptr<float>(), xc.data_ptr<float>(), g, log);
  if (!direct) kernels::copy[out.device()](out, oc);
}

void softmax_backward_kernel(Tensor& grad_x, const Tensor& grad_y, const Tensor& y, int64_t dim, bool log) {
  const char* name = log ? "log_softmax_backward" : "softmax_backward";
  if (grad_x.numel() == 0) return;
  KILN_CHECK(grad_y.sizes() == y.sizes() && grad_x.sizes() == y.sizes(),
             "{}: shapes differ (grad_x {}, grad_y {}, y {})", name, grad_x.sizes(), grad_y.sizes(), y.sizes());
  const DType cd = compute_dtype(y.dtype(), name);
  Tensor gc = dense_as(grad_y, cd), yc = dense_as(y, cd);
  const bool direct = grad_x.is_contiguous() && grad_x.dtype() == cd;
  Tensor oc = direct ? grad_x : make_tensor(grad_x.sizes(), cd, grad_x.device());
  const Dims g = split_at(y.sizes(), y.dim() == 0 ? 0 : dim);
  if (cd == kFloat64)
    softmax_backward_typed(oc.data_ptr<double>(), gc.data_ptr<double>(), yc.data_ptr<double>(), g, log);
  else
    softmax_backward_typed(oc.data_ptr<float>(), gc.data_ptr<float>(), yc.data_ptr<float>(), g, log);
  if (!direct) kernels::copy[grad_x.device()](grad_x, oc);
}

}  // namespace

KILN_REGISTER_KERNEL(softmax, DeviceType::CPU, &softmax_kernel);
KILN_REGISTER_KERNEL(softmax_backward, DeviceType::CPU, &softmax_backward_kernel);

}  // namespace kiln::cpu
