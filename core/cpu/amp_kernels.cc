// CPU kernel of mixed precision's gradient unscaling (kernels::non_finite_check_and_unscale):
// one pass that multiplies by 1/scale and notes any inf/NaN, so GradScaler reads each gradient
// once. f16/bf16 compute in f32.
#include <atomic>
#include <cmath>

#include "core/kernels.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// grad contiguous and floating, found_inf a 0-dim f32 on grad's device: the slot's contract, which
// its caller (amp/grad_scaler.cc) keeps.
void non_finite_check_and_unscale_kernel(Tensor& grad, Tensor& found_inf, double inv_scale) {
  std::atomic<bool> bad{false};
  dispatch_floating(grad.dtype(), "non_finite_check_and_unscale", [&]<class T>() {
    using A = opmath_t<T>;
    T* g = grad.data_ptr<T>();
    const A s = static_cast<A>(inv_scale);
    parallel_for(0, grad.numel(), kGrainSize, [&](int64_t lo, int64_t hi) {
      // Local copies: captured by reference, the scale might alias the stores to g and be
      // reloaded every element, which keeps the loop scalar (as sgd_range's note says).
      T* __restrict gp = g;
      const A scale = s;
      int local = 0;
      for (int64_t i = lo; i < hi; ++i) {
        const A v = static_cast<A>(gp[i]);
        local |= !std::isfinite(v);
        gp[i] = static_cast<T>(v * scale);
      }
      if (local) bad.store(true, std::memory_order_relaxed);
    });
  });
  grad.storage()->bump_version();
  if (bad.load()) {
    *found_inf.data_ptr<float>() = 1.0f;
    found_inf.storage()->bump_version();
  }
}

}  // namespace

KILN_REGISTER_KERNEL(non_finite_check_and_unscale, DeviceType::CPU, &non_finite_check_and_unscale_kernel);

}  // namespace kiln::cpu
