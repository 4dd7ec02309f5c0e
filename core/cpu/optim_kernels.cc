// CPU kernels of the fused optimizer updates (kernels::sgd_step, kernels::adam_step): one pass
// per parameter over raw pointers, following torch.optim's single-tensor SGD and Adam operation
// for operation. f32/f64 compute in their own type; f16/bf16 load, compute in f32 and round once.
#include <cmath>

#include "core/kernels.h"
#include "core/optim_step_check.h"
#include "core/parallel.h"

namespace kiln::cpu {
namespace {

// The per-element constants of one SGD step, in the type the math is done in.
template <class A> struct SgdConsts {
  A lr, momentum, one_minus_damp, weight_decay, grad_sign;
  bool use_wd, nesterov, first;
};

// p -= lr * d over one range, with d the (weight-decayed, momentum-filtered) gradient; `first`
// seeds the momentum buffer with the gradient, as PyTorch does on a parameter's first step. As
// adam_range below: by value, restrict pointers, selects on loop-invariant flags, so the loop
// vectorises (a lambda that captured the float constants by reference had to reload them after
// every store to p or buf, which might alias them, and ran scalar: a quarter of the MNIST MLP's
// step). kMomentum: `buf` exists (it is read and written).
template <class T, bool kMomentum>
void sgd_range(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t begin, int64_t end,
               const SgdConsts<opmath_t<T>> c) {
  using A = opmath_t<T>;
  for (int64_t i = begin; i < end; ++i) {
    const A pi = static_cast<A>(p[i]);
    A d = static_cast<A>(g[i]) * c.grad_sign;  // exact negation for maximize
    d = c.use_wd ? d + c.weight_decay * pi : d;
    if constexpr (kMomentum) {
      const A b = c.first ? d : c.momentum * static_cast<A>(buf[i]) + c.one_minus_damp * d;
      buf[i] = static_cast<T>(b);
      d = c.nesterov ? d + c.momentum * b : b;
    }
    p[i] = static_cast<T>(pi - c.lr * d);
  }
}

// The per-element constants of one Adam step, in the type the math is done in.
template <class A> struct AdamConsts {
  A lerp_w, one_minus_lerp_w, beta2, one_minus_beta2, weight_decay, decay, eps, bias_corr2_sqrt, neg_step_size,
      grad_sign;
  bool small_lerp_w, coupled_wd, decoupled_wd;
};

template <class A> AdamConsts<A> adam_consts(const AdamStepParams& s) {
  AdamConsts<A> c;
  c.lerp_w = static_cast<A>(1 - s.beta1);
  c.one_minus_lerp_w = static_cast<A>(1) - c.lerp_w;
  c.small_lerp_w = std::abs(c.lerp_w) < A(0.5);
  c.beta2 = static_cast<A>(s.beta2);
  c.one_minus_beta2 = static_cast<A>(1 - s.beta2);
  c.weight_decay = static_cast<A>(s.weight_decay);
  c.decay = static_cast<A>(1 - s.lr * s.weight_decay);
  c.eps = static_cast<A>(s.eps);
  c.bias_corr2_sqrt = static_cast<A>(s.bias_corr2_sqrt);
  c.neg_step_size = static_cast<A>(-s.step_size);
  c.grad_sign = s.maximize ? A(-1) : A(1);
  c.coupled_wd = !s.decoupled && s.weight_decay != 0;
  c.decoupled_wd = s.decoupled && s.weight_decay != 0;
  return c;
}

// One range of the fused update. Everything arrives by value and the pointers are restrict, so
// the compiler knows stores to p/m/v alias nothing it reads; the branches are selects on
// loop-invariant flags; with -fno-math-errno for the sqrt (see core/BUILD) the loop vectorises.
template <class T, bool kAmsgrad>
void adam_range(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v, T* __restrict vmax,
                int64_t begin, int64_t end, const AdamConsts<opmath_t<T>> c) {
  using A = opmath_t<T>;
  for (int64_t i = begin; i < end; ++i) {
    A gi = static_cast<A>(g[i]) * c.grad_sign;  // exact negation for maximize
    A pi = static_cast<A>(p[i]);
    pi = c.decoupled_wd ? pi * c.decay : pi;
    gi = c.coupled_wd ? gi + c.weight_decay * pi : gi;
    A mi = static_cast<A>(m[i]);
    // torch.lerp's two forms, chosen by the weight as it does.
    const A lerp_lo = mi + c.lerp_w * (gi - mi), lerp_hi = gi - (gi - mi) * c.one_minus_lerp_w;
    mi = c.small_lerp_w ? lerp_lo : lerp_hi;
    A vi = static_cast<A>(v[i]) * c.beta2;
    vi = vi + c.one_minus_beta2 * gi * gi;
    m[i] = static_cast<T>(mi);
    v[i] = static_cast<T>(vi);
    if constexpr (kAmsgrad) {
      const A vm = static_cast<A>(vmax[i]);
      vi = vm > vi ? vm : vi;
      vmax[i] = static_cast<T>(vi);
    }
    const A denom = std::sqrt(vi) / c.bias_corr2_sqrt + c.eps;
    p[i] = static_cast<T>(pi + c.neg_step_size * mi / denom);
  }
}

void sgd_step_kernel(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& bufs,
                     const SGDStepParams& s, bool first) {
  if (params.empty()) return;
  check_sgd_step(params, grads, bufs, s);
  dispatch_floating(params.front().dtype(), "sgd_step", [&]<class T>() {
    using A = opmath_t<T>;
    const SgdConsts<A> c{.lr = static_cast<A>(s.lr), .momentum = static_cast<A>(s.momentum),
                         .one_minus_damp = static_cast<A>(1 - s.dampening),
                         .weight_decay = static_cast<A>(s.weight_decay), .grad_sign = s.maximize ? A(-1) : A(1),
                         .use_wd = s.weight_decay != 0, .nesterov = s.nesterov, .first = first};
    const bool momentum = s.momentum != 0;
    for (size_t i = 0; i < params.size(); ++i) {
      T* p = params[i].data_ptr<T>();
      const T* g = grads[i].data_ptr<T>();
      T* buf = momentum ? bufs[i].data_ptr<T>() : nullptr;
      parallel_for(0, params[i].numel(), kGrainSize, [&](int64_t begin, int64_t end) {
        if (momentum) sgd_range<T, true>(p, g, buf, begin, end, c);
        else sgd_range<T, false>(p, g, nullptr, begin, end, c);
      });
      params[i].storage()->bump_version();
      if (!bufs.empty()) bufs[i].storage()->bump_version();
    }
  });
}

void adam_step_kernel(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& exp_avgs,
                      std::vector<Tensor>& exp_avg_sqs, std::vector<Tensor>& max_exp_avg_sqs,
                      const AdamStepParams& s) {
  if (params.empty()) return;
  check_adam_step(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, s);
  dispatch_floating(params.front().dtype(), "adam_step", [&]<class T>() {
    const AdamConsts<opmath_t<T>> c = adam_consts<opmath_t<T>>(s);
    for (size_t i = 0; i < params.size(); ++i) {
      T* p = params[i].data_ptr<T>();
      const T* g = grads[i].data_ptr<T>();
      T* m = exp_avgs[i].data_ptr<T>();
      T* v = exp_avg_sqs[i].data_ptr<T>();
      T* vmax = s.amsgrad ? max_exp_avg_sqs[i].data_ptr<T>() : nullptr;
      parallel_for(0, params[i].numel(), kGrainSize, [&](int64_t begin, int64_t end) {
        if (vmax) adam_range<T, true>(p, g, m, v, vmax, begin, end, c);
        else adam_range<T, false>(p, g, m, v, nullptr, begin, end, c);
      });
      for (Tensor* t : {&params[i], &exp_avgs[i], &exp_avg_sqs[i]}) t->storage()->bump_version();
      if (s.amsgrad) max_exp_avg_sqs[i].storage()->bump_version();
    }
  });
}

}  // namespace

KILN_REGISTER_KERNEL(sgd_step, DeviceType::CPU, &sgd_step_kernel);
KILN_REGISTER_KERNEL(adam_step, DeviceType::CPU, &adam_step_kernel);

}  // namespace kiln::cpu
