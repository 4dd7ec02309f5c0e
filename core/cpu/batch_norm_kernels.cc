// CPU training-mode batch norm and its backward over x [N, C, *] viewed as [N, C, S]: channels
// are split across threads, and each channel's N planes of S contiguous elements are reduced
// in two passes (mean, then the sum of squared deviations), within a plane in the compute type
// (f32, f64 for f64 x; f16/bf16 converted to f32 in chunks) and across planes in f64.
// Backward: gx = invstd * w / M * (M g - sum(g) - xhat * sum(g xhat)), M = N * S.
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/dense.h"
#include "core/kernels.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

template <class T> using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
template <class T> using CMap = Eigen::Map<const Arr<T>>;
template <class T> using MMap = Eigen::Map<Arr<T>>;

constexpr int64_t kChunk = 2048;  // elements of a plane handled at once (one buffer per thread)

/// x [N, C, *] as [N, C, S].
struct Geometry {
  int64_t n = 0, c = 0, s = 0;
  int64_t count() const { return n * s; }  // values per channel
};

Geometry geometry(const Tensor& x, const char* op) {
  KILN_CHECK(x.dim() >= 2, "{}: input must be at least 2-D [N, C, ...], got shape {}", op, x.sizes());
  Geometry g{x.size(0), x.size(1), 1};
  for (int64_t d = 2; d < x.dim(); ++d) g.s *= x.size(d);
  return g;
}

/// Reads a run of T as the compute type A: in place when they match, else converted into a buffer.
template <class A, class T> class Loader {
 public:
  CMap<A> load(const T* p, int64_t m) {
    if constexpr (std::is_same_v<A, T>) {
      return CMap<A>(p, m);
    } else {
      for (int64_t j = 0; j < m; ++j) buf_[j] = static_cast<A>(static_cast<float>(p[j]));
      return CMap<A>(buf_, m);
    }
  }

 private:
  A buf_[std::is_same_v<A, T> ? 1 : kChunk];
};

/// Writes the A-valued expression `e` of length m to p as T.
template <class T, class A, class Expr> void store(T* p, int64_t m, const Expr& e, A* tmp) {
  if constexpr (std::is_same_v<A, T>) {
    MMap<A>(p, m) = e;
  } else {
    MMap<A>(tmp, m) = e;
    for (int64_t j = 0; j < m; ++j) p[j] = T(static_cast<float>(tmp[j]));
  }
}

/// Runs f(b, e) over chunks of channels, in parallel when the tensor is large enough.
template <class F> void for_channels(const Geometry& g, const F& f) {
  parallel_for(0, g.c, std::max<int64_t>(1, kGrainSize / std::max<int64_t>(g.count(), 1)), f);
}

/// f(offset, length) over channel c's elements, kChunk at a time.
template <class F> void for_each_chunk(const Geometry& g, int64_t c, const F& f) {
  for (int64_t n = 0; n < g.n; ++n) {
    const int64_t base = (n * g.c + c) * g.s;
    for (int64_t i = 0; i < g.s; i += kChunk) f(base + i, std::min(kChunk, g.s - i));
  }
}

/// Per channel: mean, biased variance, invstd = 1 / sqrt(var + eps), and out = xhat * w + b.
template <class T> void forward_typed(T* out, const T* x, const double* w, const double* b, double* mean,
                                      double* var, double* invstd, const Geometry& g, double eps) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const double M = static_cast<double>(g.count());
  for_channels(g, [&](int64_t c0, int64_t c1) {
    Loader<A, T> ld;
    A tmp[kChunk];
    for (int64_t c = c0; c < c1; ++c) {
      double sum = 0;
      for_each_chunk(g, c, [&](int64_t at, int64_t m) { sum += static_cast<double>(ld.load(x + at, m).sum()); });
      const double mu = sum / M;
      const A mu_a = static_cast<A>(mu);
      double ss = 0;
      for_each_chunk(g, c, [&](int64_t at, int64_t m) {
        ss += static_cast<double>((ld.load(x + at, m) - mu_a).square().sum());
      });
      const double v = ss / M, is = 1.0 / std::sqrt(v + eps);
      mean[c] = mu;
      var[c] = v;
      invstd[c] = is;
      const double scale = is * (w ? w[c] : 1.0), shift = (b ? b[c] : 0.0) - mu * scale;
      const A sa = static_cast<A>(scale), sh = static_cast<A>(shift);
      for_each_chunk(g, c, [&](int64_t at, int64_t m) { store(out + at, m, ld.load(x + at, m) * sa + sh, tmp); });
    }
  });
}

/// Per channel: sum(g) and sum(g (x - mean)), then grad_x = a g + b x + k (the standard formula
/// rearranged). gsum, gxsum receive the sums (grad_bias, and grad_weight / invstd).
template <class T> void backward_typed(T* gx, const T* gy, const T* x, const double* w, const double* mean,
                                       const double* invstd, double* gsum, double* gxsum, const Geometry& g) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const double M = static_cast<double>(g.count());
  for_channels(g, [&](int64_t c0, int64_t c1) {
    Loader<A, T> lg, lx;
    A tmp[kChunk];
    for (int64_t c = c0; c < c1; ++c) {
      const A mu_a = static_cast<A>(mean[c]);
      double s1 = 0, s2 = 0;
      for_each_chunk(g, c, [&](int64_t at, int64_t m) {
        CMap<A> gv = lg.load(gy + at, m);
        s1 += static_cast<double>(gv.sum());
        s2 += static_cast<double>((gv * (lx.load(x + at, m) - mu_a)).sum());
      });
      gsum[c] = s1;
      gxsum[c] = s2;
      if (gx == nullptr) continue;
      const double is = invstd[c], a = is * (w ? w[c] : 1.0);
      const double bx = -a * is * is * s2 / M, k = -a * s1 / M - bx * mean[c];
      const A aa = static_cast<A>(a), ba = static_cast<A>(bx), ka = static_cast<A>(k);
      for_each_chunk(g, c, [&](int64_t at, int64_t m) {
        CMap<A> gv = lg.load(gy + at, m);
        store(gx + at, m, gv * aa + lx.load(x + at, m) * ba + ka, tmp);
      });
    }
  });
}

/// A [C] f64 tensor holding `v`, copied into `dst` (any floating dtype and strides).
void write_channels(Tensor& dst, const std::vector<double>& v) {
  Tensor src = make_tensor({static_cast<int64_t>(v.size())}, kFloat64, kCPU);
  std::copy(v.begin(), v.end(), src.data_ptr<double>());
  kernels::copy[kCPU](dst, src);
}

const double* f64_or_null(const Tensor& t, Tensor& keep) {
  if (!t.defined()) return nullptr;
  keep = dense_as(t, kFloat64);
  return keep.data_ptr<double>();
}

void batch_norm_kernel(Tensor& out, Tensor& save_mean, Tensor& save_invstd, const Tensor& x0, const Tensor& weight,
                       const Tensor& bias, Tensor& running_mean, Tensor& running_var, double momentum, double eps) {
  if (x0.numel() == 0) return;
  const Geometry g = geometry(x0, "batch_norm");
  KILN_CHECK(g.count() > 1, "batch_norm: expected more than 1 value per channel when training, got input shape {}",
             x0.sizes());
  const Tensor x = dense_as(x0, x0.dtype());
  Tensor wk, bk;
  const double* w = f64_or_null(weight, wk);
  const double* b = f64_or_null(bias, bk);
  const bool direct = out.is_contiguous() && out.dtype() == x.dtype();
  Tensor o = direct ? out : make_tensor(x.sizes(), x.dtype(), kCPU);
  std::vector<double> mean(g.c), var(g.c), invstd(g.c);
  KILN_DISPATCH_FLOATING(x.dtype(), "batch_norm", [&]<class T>() {
    forward_typed<T>(o.data_ptr<T>(), x.data_ptr<T>(), w, b, mean.data(), var.data(), invstd.data(), g, eps);
  });
  if (!direct) kernels::copy[kCPU](out, o);
  write_channels(save_mean, mean);
  write_channels(save_invstd, invstd);
  if (running_mean.defined()) {
    // PyTorch's update: the running variance takes the unbiased batch variance.
    const Tensor rm = dense_as(running_mean, kFloat64), rv = dense_as(running_var, kFloat64);
    const double* pm = rm.data_ptr<double>();
    const double* pv = rv.data_ptr<double>();
    const double unbias = static_cast<double>(g.count()) / static_cast<double>(g.count() - 1);
    std::vector<double> nm(g.c), nv(g.c);
    for (int64_t c = 0; c < g.c; ++c) {
      nm[c] = (1 - momentum) * pm[c] + momentum * mean[c];
      nv[c] = (1 - momentum) * pv[c] + momentum * var[c] * unbias;
    }
    write_channels(running_mean, nm);
    write_channels(running_var, nv);
  }
}

void batch_norm_backward_kernel(Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias, const Tensor& grad_out,
                                const Tensor& x0, const Tensor& weight, const Tensor& save_mean,
                                const Tensor& save_invstd) {
  if (x0.numel() == 0) {
    for (Tensor* t : {&grad_x, &grad_weight, &grad_bias})
      if (t->defined()) kernels::fill[kCPU](*t, 0);
    return;
  }
  const Geometry g = geometry(x0, "batch_norm_backward");
  KILN_CHECK(grad_out.sizes() == x0.sizes(), "batch_norm_backward: grad_out shape {} differs from input shape {}",
             grad_out.sizes(), x0.sizes());
  const Tensor x = dense_as(x0, x0.dtype()), gy = dense_as(grad_out, x0.dtype());
  Tensor wk, mk, ik;
  const double* w = f64_or_null(weight, wk);
  const double* mean = f64_or_null(save_mean, mk);
  const double* invstd = f64_or_null(save_invstd, ik);
  const bool direct = !grad_x.defined() || (grad_x.is_contiguous() && grad_x.dtype() == x.dtype());
  Tensor gx = direct ? grad_x : make_tensor(x.sizes(), x.dtype(), kCPU);
  std::vector<double> gsum(g.c), gxsum(g.c);
  KILN_DISPATCH_FLOATING(x.dtype(), "batch_norm_backward", [&]<class T>() {
    backward_typed<T>(gx.defined() ? gx.data_ptr<T>() : nullptr, gy.data_ptr<T>(), x.data_ptr<T>(), w, mean, invstd,
                      gsum.data(), gxsum.data(), g);
  });
  if (!direct) kernels::copy[kCPU](grad_x, gx);
  if (grad_weight.defined()) {
    for (int64_t c = 0; c < g.c; ++c) gxsum[c] *= invstd[c];  // sum(g * xhat)
    write_channels(grad_weight, gxsum);
  }
  if (grad_bias.defined()) write_channels(grad_bias, gsum);
}

}  // namespace

KILN_REGISTER_KERNEL(batch_norm, DeviceType::CPU, &batch_norm_kernel);
KILN_REGISTER_KERNEL(batch_norm_backward, DeviceType::CPU, &batch_norm_backward_kernel);

}  // namespace kiln::cpu
