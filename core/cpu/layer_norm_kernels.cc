// CPU layer norm over the rows of x [M, N] (core/kernels.h has the contract): two-pass mean and
// variance per row (biased, as PyTorch), rows split across threads. The backward writes grad_x
// row by row and reduces grad_weight / grad_bias over rows through one partial sum per chunk of
// rows, added up afterwards. f16/bf16 compute in f32 (through converted copies).
#include <Eigen/Core>

#include <cmath>
#include <vector>

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

template <class T>
void forward_typed(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t M, int64_t N, double eps) {
  parallel_for(0, M, row_grain(N), [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
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
    Arr<T> xhat(N), dxhat(N);
    for (int64_t c = cb; c < ce; ++c) {
      const int64_t r0 = c * per, r1 = std::min(M, r0 + per);
      for (int64_t i = r0; i < r1; ++i) {
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
