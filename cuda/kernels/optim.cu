// Fused SGD and Adam/AdamW steps on CUDA, multi-tensor applied as PyTorch's fused optimizers
// are: a launch takes, by value, the pointers of up to a few dozen tensors per list and a
// block -> (tensor, chunk) map; each block updates one kOptimChunk-element chunk of one tensor,
// and the host launches as often as the lists need. Per element the same operations as
// core/cpu/optim_kernels.cc, in float for the 16-bit types and f32, double for f64.
#include <cstdint>
#include <cstring>

#include "cuda/kernels/dtypes.cuh"
#include "cuda/kernels/optim.h"

namespace kiln::cuda::kern {
namespace {

constexpr int kThreads = 512;
constexpr int kMaxBlocks = 320;

// Tensors a launch can name when it walks `depth` lists (params, grads, buffers...), chosen so
// the kernel argument stays under the classic 4 KiB parameter limit (as PyTorch's
// depth_to_max_tensors).
constexpr int max_tensors(int depth) {
  constexpr int kByDepth[] = {110, 64, 48, 36, 30};
  return kByDepth[depth - 1];
}

template <int D> struct TensorListMeta {
  static constexpr int kTensors = max_tensors(D);
  void* ptrs[D][kTensors];
  int64_t numels[kTensors];
  unsigned char block_tensor[kMaxBlocks];
  int block_chunk[kMaxBlocks];
};
static_assert(sizeof(TensorListMeta<5>) < 3500 && sizeof(TensorListMeta<2>) < 3500, "kernel argument too large");

template <class T, int D, class Op>
__global__ void __launch_bounds__(kThreads) multi_tensor_kernel(TensorListMeta<D> meta, Op op) {
  const int t = meta.block_tensor[blockIdx.x];
  const int64_t start = static_cast<int64_t>(meta.block_chunk[blockIdx.x]) * kOptimChunk;
  const int64_t left = meta.numels[t] - start;
  const int64_t n = left < kOptimChunk ? left : kOptimChunk;
  T* ptrs[D];
#pragma unroll
  for (int k = 0; k < D; ++k) ptrs[k] = static_cast<T*>(meta.ptrs[k][t]) + start;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) op(ptrs, i);
}

// Cuts every non-empty tensor into chunks, fills TensorListMeta and launches whenever its block
// map or tensor slots are full; a tensor split across launches carries over to slot 0.
template <class T, int D, class Op>
void multi_tensor_apply(int n, void* const* const (&lists)[D], const int64_t* numels, const Op& op,
                        CUstream_st* stream) {
  TensorListMeta<D> meta;
  int nt = 0, nb = 0;
  auto launch = [&] {
    multi_tensor_kernel<T, D, Op><<<static_cast<unsigned>(nb), kThreads, 0, stream>>>(meta, op);
    nb = 0;
  };
  for (int i = 0; i < n; ++i) {
    const int64_t numel = numels[i];
    if (numel == 0) continue;
    for (int k = 0; k < D; ++k) meta.ptrs[k][nt] = lists[k][i];
    meta.numels[nt] = numel;
    const int64_t chunks = (numel + kOptimChunk - 1) / kOptimChunk;
    for (int64_t c = 0; c < chunks; ++c) {
      meta.block_tensor[nb] = static_cast<unsigned char>(nt);
      meta.block_chunk[nb] = static_cast<int>(c);
      ++nb;
      const bool last_chunk = c == chunks - 1;
      if (nb == kMaxBlocks || (last_chunk && nt + 1 == TensorListMeta<D>::kTensors)) {
        launch();
        if (last_chunk) {
          nt = -1;  // the next tensor starts a fresh list
        } else {
          for (int k = 0; k < D; ++k) meta.ptrs[k][0] = meta.ptrs[k][nt];
          meta.numels[0] = meta.numels[nt];
          nt = 0;
        }
      }
    }
    ++nt;
  }
  if (nb > 0) launch();
}

// p -= lr * d with d the (weight-decayed, momentum-filtered) gradient; lists p, g[, buf].
template <class T> struct SGDOp {
  using A = opmath_t<T>;
  A lr, mom, wd, one_minus_damp;
  bool use_wd, use_mom, nesterov, maximize, first;

  __device__ __forceinline__ void operator()(T* const* ptrs, int64_t i) const {
    T* p = ptrs[0];
    const T* g = ptrs[1];
    const A gi = to_math(g[i]), pi = to_math(p[i]);
    A d = maximize ? -gi : gi;
    if (use_wd) d = d + wd * pi;
    if (use_mom) {
      T* buf = ptrs[2];
      const A b = first ? d : mom * to_math(buf[i]) + one_minus_damp * d;
      buf[i] = from_math<T>(b);
      d = nesterov ? d + mom * b : b;
    }
    p[i] = from_math<T>(pi - lr * d);
  }
};

// torch.optim.Adam's single-tensor step; lists p, g, exp_avg, exp_avg_sq[, max_exp_avg_sq].
template <class T, bool kAmsgrad> struct AdamOp {
  using A = opmath_t<T>;
  A lerp_w, one_minus_lerp_w, beta2, one_minus_beta2, weight_decay, decay, eps, bias_corr2_sqrt, neg_step_size,
      grad_sign;
  bool small_lerp_w, coupled_wd, decoupled_wd;

  __device__ __forceinline__ void operator()(T* const* ptrs, int64_t i) const {
    T* p = ptrs[0];
    const T* g = ptrs[1];
    T* m = ptrs[2];
    T* v = ptrs[3];
    A gi = to_math(g[i]) * grad_sign;
    A pi = to_math(p[i]);
    pi = decoupled_wd ? pi * decay : pi;
    gi = coupled_wd ? gi + weight_decay * pi : gi;
    A mi = to_math(m[i]);
    mi = small_lerp_w ? mi + lerp_w * (gi - mi) : gi - (gi - mi) * one_minus_lerp_w;
    A vi = to_math(v[i]) * beta2;
    vi = vi + one_minus_beta2 * gi * gi;
    m[i] = from_math<T>(mi);
    v[i] = from_math<T>(vi);
    if constexpr (kAmsgrad) {
      T* vmax = ptrs[4];
      const A vm = to_math(vmax[i]);
      vi = vm > vi ? vm : vi;
      vmax[i] = from_math<T>(vi);
    }
    const A denom = sqrt(vi) / bias_corr2_sqrt + eps;
    p[i] = from_math<T>(pi + neg_step_size * mi / denom);
  }
};

}  // namespace

void launch_sgd_step(ScalarType type, int n, void* const* params, const void* const* grads, void* const* bufs,
                     const int64_t* numels, const SGDStepParams& s, bool first, CUstream_st* stream) {
  dispatch_floating(type, [&]<class T>() {
    using A = opmath_t<T>;
    SGDOp<T> op;
    op.lr = static_cast<A>(s.lr);
    op.mom = static_cast<A>(s.momentum);
    op.wd = static_cast<A>(s.weight_decay);
    op.one_minus_damp = static_cast<A>(1 - s.dampening);
    op.use_wd = s.weight_decay != 0;
    op.use_mom = s.momentum != 0;
    op.nesterov = s.nesterov;
    op.maximize = s.maximize;
    op.first = first;
    void* const* g = const_cast<void* const*>(grads);
    if (bufs != nullptr) {
      void* const* const lists[3] = {params, g, bufs};
      multi_tensor_apply<T, 3>(n, lists, numels, op, stream);
    } else {
      void* const* const lists[2] = {params, g};
      multi_tensor_apply<T, 2>(n, lists, numels, op, stream);
    }
  });
}

void launch_adam_step(ScalarType type, int n, void* const* params, const void* const* grads, void* const* exp_avgs,
                      void* const* exp_avg_sqs, void* const* max_exp_avg_sqs, const int64_t* numels,
                      const AdamStepParams& s, CUstream_st* stream) {
  dispatch_floating(type, [&]<class T>() {
    using A = opmath_t<T>;
    auto fill = [&](auto& op) {
      op.lerp_w = static_cast<A>(1 - s.beta1);
      op.one_minus_lerp_w = static_cast<A>(1) - op.lerp_w;
      op.small_lerp_w = (op.lerp_w < 0 ? -op.lerp_w : op.lerp_w) < A(0.5);
      op.beta2 = static_cast<A>(s.beta2);
      op.one_minus_beta2 = static_cast<A>(1 - s.beta2);
      op.weight_decay = static_cast<A>(s.weight_decay);
      op.decay = static_cast<A>(1 - s.lr * s.weight_decay);
      op.eps = static_cast<A>(s.eps);
      op.bias_corr2_sqrt = static_cast<A>(s.bias_corr2_sqrt);
      op.neg_step_size = static_cast<A>(-s.step_size);
      op.grad_sign = s.maximize ? A(-1) : A(1);
      op.coupled_wd = !s.decoupled && s.weight_decay != 0;
      op.decoupled_wd = s.decoupled && s.weight_decay != 0;
    };
    void* const* g = const_cast<void* const*>(grads);
    if (max_exp_avg_sqs != nullptr) {
      AdamOp<T, true> op;
      fill(op);
      void* const* const lists[5] = {params, g, exp_avgs, exp_avg_sqs, max_exp_avg_sqs};
      multi_tensor_apply<T, 5>(n, lists, numels, op, stream);
    } else {
      AdamOp<T, false> op;
      fill(op);
      void* const* const lists[4] = {params, g, exp_avgs, exp_avg_sqs};
      multi_tensor_apply<T, 4>(n, lists, numels, op, stream);
    }
  });
}

}  // namespace kiln::cuda::kern
