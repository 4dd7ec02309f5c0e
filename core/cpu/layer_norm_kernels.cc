// CPU layer norm over the rows of x [M, N] (core/kernels.h has the contract): two-pass mean and
// variance per row (biased, as PyTorch), rows split across threads. The backward writes grad_x
// row by row and reduces grad_weight / grad_bias over rows through one partial sum per chunk of
// rows, added up afterwards. f16/bf16 compute in f32 (through converted copies); f32 rows run
// through core/cpu/vec8.h: the forward reads x from memory once and writes y once (the mean and
// variance passes re-read the row in cache), the backward takes its two row sums and the
// weight/bias partials in one pass and writes grad_x in a second, with no temporary rows.
#include <Eigen/Core>

#include <cmath>
#include <type_traits>
#include <vector>

#include "core/cpu/vec8.h"
#include "core/dense.h"
#include "core/kernels.h"
#include "core/ops/layer_norm.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

template <class T> using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
template <class T> using CMap = Eigen::Map<const Arr<T>>;
template <class T> using MMap = Eigen::Map<Arr<T>>;

template <class T> const T* ptr_or_null(const Tensor& t) { return t.defined() ? t.data_ptr<T>() : nullptr; }

int64_t row_grain(int64_t N) { return std::max<int64_t>(1, kGrainSize / std::max<int64_t>(N, 1)); }

/// Sum of x[0, N) over four vector accumulators (a fixed order for a given N).
template <class F> float row_sum_f32(int64_t N, const F& term) {
  using namespace vec;
  F8 a0 = splat(0.0f), a1 = a0, a2 = a0, a3 = a0;
  int64_t j = 0;
  for (; j + 4 * kW <= N; j += 4 * kW) {
    a0 += term(j);
    a1 += term(j + kW);
    a2 += term(j + 2 * kW);
    a3 += term(j + 3 * kW);
  }
  for (; j + kW <= N; j += kW) a0 += term(j);
  return hsum((a0 + a1) + (a2 + a3));
}

/// One f32 row: mean, then the variance of x - mean (two passes over the row, in cache after
/// the first), then y = (x - mean) * rstd * w + b in one pass.
void forward_row_f32(float* y, float& mean, float& rstd, const float* x, const float* w, const float* b, int64_t N,
                     float eps) {
  using namespace vec;
  const int64_t body = N - N % kW, tail = N - body;
  float s = row_sum_f32(body, [&](int64_t j) { return load(x + j); });
  if (tail) s += hsum(load_tail(x + body, tail, 0.0f));
  const float mu = s / static_cast<float>(N);
  const F8 mv = splat(mu);
  float q = row_sum_f32(body, [&](int64_t j) {
    // The next row streams in while this one computes in cache.
    __builtin_prefetch(x + N + j, 0);
    __builtin_prefetch(y + N + j, 1);
    const F8 d = load(x + j) - mv;
    return d * d;
  });
  if (tail) {
    const F8 d = load_tail(x + body, tail, mu) - mv;
    q += hsum(d * d);
  }
  const float rs = 1.0f / std::sqrt(q / static_cast<float>(N) + eps);
  mean = mu;
  rstd = rs;
  const F8 rv = splat(rs);
  auto affine = [&](F8 v, int64_t j, int64_t n) {
    if (w) v *= n == kW ? load(w + j) : load_tail(w + j, n, 0.0f);
    if (b) v += n == kW ? load(b + j) : load_tail(b + j, n, 0.0f);
    return v;
  };
  for (int64_t j = 0; j < body; j += kW) store(y + j, affine((load(x + j) - mv) * rv, j, kW));
  if (tail) store_tail(y + body, affine((load_tail(x + body, tail, 0.0f) - mv) * rv, body, tail), tail);
}

template <class T>
void forward_typed(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t M, int64_t N, double eps) {
  parallel_for(0, M, row_grain(N), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      if constexpr (std::is_same_v<T, float>) {
        forward_row_f32(y + i * N, mean[i], rstd[i], x + i * N, w, b, N, static_cast<float>(eps));
        continue;
      }
      CMap<T> xr(x + i * N, N);
      MMap<T> yr(y + i * N, N);
      const T mu = xr.mean();
      const T var = (xr - mu).square().mean();
      const T rs = T(1) / std::sqrt(var + static_cast<T>(eps));
      mean[i] = mu;
      rstd[i] = rs;
      yr = (xr - mu) * rs;
      if (w) yr *= CMap<T>(w, N);
      if (b) yr += CMap<T>(b, N);
    }
  });
}

// xhat = (x - mean) * rstd, dxhat = g * w:
//   grad_x = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
//   grad_w = sum over rows of g * xhat, grad_b = sum over rows of g

/// One f32 row of the backward: pass 1 takes sum(dxhat), sum(dxhat * xhat) and adds g * xhat and
/// g into the chunk's partial rows pw, pb (when not null); pass 2 (when gx is not null) writes
/// grad_x, recomputing xhat and dxhat from x and g, which are in cache by then.
void backward_row_f32(float* gx, float* pw, float* pb, const float* g, const float* x, float mean, float rstd,
                      const float* w, int64_t N) {
  using namespace vec;
  const int64_t body = N - N % kW, tail = N - body;
  const F8 mv = splat(mean), rv = splat(rstd);
  F8 s1 = splat(0.0f), s2 = s1;
  // Lanes past the row read g as 0, so they add nothing to the sums.
  auto pass1 = [&](int64_t j, int64_t n) {
    const bool full = n == kW;
    const F8 gv = full ? load(g + j) : load_tail(g + j, n, 0.0f);
    const F8 xh = ((full ? load(x + j) : load_tail(x + j, n, 0.0f)) - mv) * rv;
    const F8 dxh = w ? gv * (full ? load(w + j) : load_tail(w + j, n, 0.0f)) : gv;
    s1 += dxh;
    s2 += dxh * xh;
    if (pw) {
      const F8 a = (full ? load(pw + j) : load_tail(pw + j, n, 0.0f)) + gv * xh;
      const F8 c = (full ? load(pb + j) : load_tail(pb + j, n, 0.0f)) + gv;
      if (full) {
        store(pw + j, a);
        store(pb + j, c);
      } else {
        store_tail(pw + j, a, n);
        store_tail(pb + j, c, n);
      }
    }
  };
  for (int64_t j = 0; j < body; j += kW) pass1(j, kW);
  if (tail) pass1(body, tail);
  if (!gx) return;
  const F8 m1 = splat(hsum(s1) / static_cast<float>(N)), m2 = splat(hsum(s2) / static_cast<float>(N));
  auto pass2 = [&](int64_t j, int64_t n) {
    // The next row streams in while this one computes in cache.
    __builtin_prefetch(g + N + j, 0);
    __builtin_prefetch(x + N + j, 0);
    __builtin_prefetch(gx + N + j, 1);
    const bool full = n == kW;
    const F8 gv = full ? load(g + j) : load_tail(g + j, n, 0.0f);
    const F8 xh = ((full ? load(x + j) : load_tail(x + j, n, 0.0f)) - mv) * rv;
    const F8 dxh = w ? gv * (full ? load(w + j) : load_tail(w + j, n, 0.0f)) : gv;
    return rv * ((dxh - m1) - xh * m2);
  };
  for (int64_t j = 0; j < body; j += kW) store(gx + j, pass2(j, kW));
  if (tail) store_tail(gx + body, pass2(body, tail), tail);
}

template <class T>
void backward_typed(T* gx, T* gw, T* gb, const T* g, const T* x, const T* mean, const T* rstd, const T* w, int64_t M,
                    int64_t N) {
  const bool need_wb = gw != nullptr || gb != nullptr;
  // Chunks of rows, their count fixed by M alone; with weight/bias gradients each chunk owns a
  // partial sum, added in chunk order, so the sums do not depend on the thread count.
  constexpr int64_t kChunks = 16;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(kChunks, M));
  const int64_t per = (M + chunks - 1) / chunks;
  std::vector<T> partial(need_wb ? static_cast<size_t>(chunks * 2 * N) : 0, T(0));
  const int64_t grain = std::max<int64_t>(1, kGrainSize / std::max<int64_t>(per * N, 1));
  parallel_for(0, chunks, grain, [&](int64_t cb, int64_t ce) {
    Arr<T> xhat(std::is_same_v<T, float> ? 0 : N), dxhat(std::is_same_v<T, float> ? 0 : N);
    for (int64_t c = cb; c < ce; ++c) {
      const int64_t r0 = c * per, r1 = std::min(M, r0 + per);
      for (int64_t i = r0; i < r1; ++i) {
        if constexpr (std::is_same_v<T, float>) {
          float* pw = need_wb ? partial.data() + c * 2 * N : nullptr;
          backward_row_f32(gx ? gx + i * N : nullptr, pw, need_wb ? pw + N : nullptr, g + i * N, x + i * N, mean[i],
                           rstd[i], w, N);
          continue;
        }
        CMap<T> xr(x + i * N, N), gr(g + i * N, N);
        xhat = (xr - mean[i]) * rstd[i];
        if (need_wb) {
          MMap<T>(partial.data() + c * 2 * N, N) += gr * xhat;
          MMap<T>(partial.data() + c * 2 * N + N, N) += gr;
        }
        if (!gx) continue;
        dxhat = w ? (gr * CMap<T>(w, N)).eval() : gr.eval();
        const T m1 = dxhat.mean(), m2 = (dxhat * xhat).mean();
        MMap<T>(gx + i * N, N) = rstd[i] * (dxhat - m1 - xhat * m2);
      }
    }
  });
  if (!need_wb) return;
  Arr<T> sw = Arr<T>::Zero(N), sb = Arr<T>::Zero(N);
  for (int64_t c = 0; c < chunks; ++c) {
    sw += CMap<T>(partial.data() + c * 2 * N, N);
    sb += CMap<T>(partial.data() + c * 2 * N + N, N);
  }
  if (gw) MMap<T>(gw, N) = sw;
  if (gb) MMap<T>(gb, N) = sb;
}

DType compute_dtype(DType t) {
  KILN_CHECK(is_floating(t), "layer_norm: dtype {} is not supported (floating types only)", t);
  return t == kFloat64 ? kFloat64 : kFloat32;
}

/// `t` when it can be written directly in dtype `cd`, else a contiguous scratch of that dtype.

void layer_norm_kernel(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight,
                       const Tensor& bias, double eps) {
  const int64_t M = x.size(0), N = x.size(1);
  if (M == 0 || N == 0) return;
  const DType cd = compute_dtype(x.dtype());
  const Tensor xc = dense_as(x, cd), wc = dense_as(weight, cd), bc = dense_as(bias, cd);
  Tensor oc = writable_as(out, cd), mc = writable_as(mean, cd), rc = writable_as(rstd, cd);
  if (cd == kFloat64)
    forward_typed(oc.data_ptr<double>(), mc.data_ptr<double>(), rc.data_ptr<double>(), xc.data_ptr<double>(),
                  ptr_or_null<double>(wc), ptr_or_null<double>(bc), M, N, eps);
  else
    forward_typed(oc.data_ptr<float>(), mc.data_ptr<float>(), rc.data_ptr<float>(), xc.data_ptr<float>(),
                  ptr_or_null<float>(wc), ptr_or_null<float>(bc), M, N, eps);
  write_back(out, oc);
  write_back(mean, mc);
  write_back(rstd, rc);
}

void layer_norm_backward_kernel(Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias, const Tensor& grad_out,
                                const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight) {
  const int64_t M = x.size(0), N = x.size(1);
  if (N == 0) return;
  const DType cd = compute_dtype(x.dtype());
  if (M == 0) {
    if (grad_weight.defined()) kernels::fill[x.device()](grad_weight, Scalar(0));
    if (grad_bias.defined()) kernels::fill[x.device()](grad_bias, Scalar(0));
    return;
  }
  const Tensor gc = dense_as(grad_out, cd), xc = dense_as(x, cd), mc = dense_as(mean, cd),
               rc = dense_as(rstd, cd), wc = dense_as(weight, cd);
  Tensor gxc = writable_as(grad_x, cd), gwc = writable_as(grad_weight, cd), gbc = writable_as(grad_bias, cd);
  if (cd == kFloat64)
    backward_typed(gxc.defined() ? gxc.data_ptr<double>() : nullptr,
                   gwc.defined() ? gwc.data_ptr<double>() : nullptr, gbc.defined() ? gbc.data_ptr<double>() : nullptr,
                   gc.data_ptr<double>(), xc.data_ptr<double>(), mc.data_ptr<double>(), rc.data_ptr<double>(),
                   ptr_or_null<double>(wc), M, N);
  else
    backward_typed(gxc.defined() ? gxc.data_ptr<float>() : nullptr, gwc.defined() ? gwc.data_ptr<float>() : nullptr,
                   gbc.defined() ? gbc.data_ptr<float>() : nullptr, gc.data_ptr<float>(), xc.data_ptr<float>(),
                   mc.data_ptr<float>(), rc.data_ptr<float>(), ptr_or_null<float>(wc), M, N);
  write_back(grad_x, gxc);
  write_back(grad_weight, gwc);
  write_back(grad_bias, gbc);
}

}  // namespace

KILN_REGISTER_KERNEL(layer_norm, DeviceType::CPU, &layer_norm_kernel);
KILN_REGISTER_KERNEL(layer_norm_backward, DeviceType::CPU, &layer_norm_backward_kernel);

}  // namespace kiln::cpu
