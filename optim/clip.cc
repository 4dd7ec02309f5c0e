// Gradient clipping. Contiguous f32/f64 CPU gradients are reduced in fixed-size blocks summed in
// order (the result does not depend on the thread count); others go through tensor ops.
#include "optim/clip.h"

#include <cmath>
#include <limits>

#include "core/grad_mode.h"
#include "core/ops.h"
#include "core/parallel.h"

namespace kiln::optim {

namespace {

constexpr int64_t kBlock = 16384;

bool fast_path(const Tensor& g) {
  return g.device().is_cpu() && g.is_contiguous() && (g.dtype() == kFloat32 || g.dtype() == kFloat64);
}

// sum f(g[i]) over [lo, hi) in 8 independent lanes, so the compiler can vectorise the reduction
// without reassociating floating-point sums; the lane order is fixed, so results are
// reproducible.
template <class T, class F>
double lane_sum(const T* g, int64_t lo, int64_t hi, const F& f) {
  constexpr int kLanes = 8;
  double lanes[kLanes] = {};
  int64_t i = lo;
  for (; i + kLanes <= hi; i += kLanes)
    for (int l = 0; l < kLanes; ++l) lanes[l] += f(static_cast<double>(g[i + l]));
  double acc = 0;
  for (; i < hi; ++i) acc += f(static_cast<double>(g[i]));
  for (int l = 0; l < kLanes; ++l) acc += lanes[l];
  return acc;
}

// sum |g|^p (or max |g| when p is infinite) over one gradient, accumulated in f64.
template <class T>
double reduce_raw(const T* g, int64_t n, double p) {
  const bool inf = std::isinf(p), two = p == 2.0, one = p == 1.0;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<double> partial(blocks, 0.0);
  parallel_for(0, blocks, std::max<int64_t>(1, kGrainSize / kBlock), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
      double acc = 0;
      if (inf) {
        for (int64_t i = lo; i < hi; ++i) {
          double a = std::abs(static_cast<double>(g[i]));
          acc = (a > acc || std::isnan(a)) ? a : acc;
        }
      } else if (two) {
        acc = lane_sum(g, lo, hi, [](double x) { return x * x; });
      } else if (one) {
        acc = lane_sum(g, lo, hi, [](double x) { return std::abs(x); });
      } else {
        for (int64_t i = lo; i < hi; ++i) acc += std::pow(std::abs(static_cast<double>(g[i])), p);
      }
      partial[b] = acc;
    }
  });
  double total = 0;
  for (double v : partial) total = inf ? ((v > total || std::isnan(v)) ? v : total) : total + v;
  return total;
}

double reduce_grad(const Tensor& g, double p) {
  if (fast_path(g)) {
    return g.dtype() == kFloat32 ? reduce_raw(g.data_ptr<float>(), g.numel(), p)
                                 : reduce_raw(g.data_ptr<double>(), g.numel(), p);
  }
  Tensor a = (g.dtype() == kFloat64 ? g : g.to(kFloat32)).abs();
  if (a.numel() == 0) return 0;
  if (std::isinf(p)) return a.max().item<double>();
  if (p == 1.0) return a.sum().item<double>();
  if (p == 2.0) return (a * a).sum().item<double>();
  return a.pow(p).sum().item<double>();
}

template <class T, class F>
void map_raw(T* g, int64_t n, const F& f) {
  parallel_for(0, n, kGrainSize, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) g[i] = f(g[i]);
  });
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  KILN_CHECK(norm_type > 0, "clip_grad_norm_: norm_type must be positive or infinite, got {}", norm_type);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) grads.push_back(g);
  }
  if (grads.empty()) return 0.0;
  const bool inf = std::isinf(norm_type);
  double acc = 0;
  for (const Tensor& g : grads) {
    double r = reduce_grad(g, norm_type);
    acc = inf ? ((r > acc || std::isnan(r)) ? r : acc) : acc + r;
  }
  const double total = inf ? acc : norm_type == 2.0 ? std::sqrt(acc) : norm_type == 1.0 ? acc
                                                                      : std::pow(acc, 1.0 / norm_type);
  KILN_CHECK(!error_if_nonfinite || std::isfinite(total),
             "clip_grad_norm_: the total norm of order {} of the gradients is non-finite ({}), so they cannot be "
             "clipped",
             norm_type, total);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1.0 || std::isnan(coef)) {
    for (Tensor& g : grads) {
      if (fast_path(g)) {
        if (g.dtype() == kFloat32) {
          const float c = static_cast<float>(coef);
          map_raw(g.data_ptr<float>(), g.numel(), [c](float x) { return x * c; });
        } else {
          map_raw(g.data_ptr<double>(), g.numel(), [coef](double x) { return x * coef; });
        }
        g.storage()->bump_version();
      } else {
        g.mul_(coef);
      }
    }
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  KILN_CHECK(clip_value >= 0, "clip_grad_value_: clip_value must be >= 0, got {}", clip_value);
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (fast_path(g)) {
      auto clamp = [&]<class T>(T* data) {
        const T hi = static_cast<T>(clip_value), lo = -hi;
        map_raw(data, g.numel(), [lo, hi](T x) { return x < lo ? lo : (x > hi ? hi : x); });
      };
      if (g.dtype() == kFloat32) clamp(g.data_ptr<float>());
      else clamp(g.data_ptr<double>());
      g.storage()->bump_version();
    } else {
      g.copy_(g.clamp(-clip_value, clip_value));
    }
  }
}

}  // namespace kiln::optim
