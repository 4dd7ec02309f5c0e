// Fused cross-entropy on CUDA over the rows of contiguous [N, C] logits: a warp per row when C is
// small, a block per row otherwise. The forward takes max, sum of exponentials (and sum of logits
// for label smoothing) in one row reduction each, math in float (double for f64); the backward
// recomputes softmax from the saved lse elementwise, so it needs no reduction at all.
#include <cstdint>

#include "cuda/kernels/dtypes.cuh"
#include "cuda/kernels/cross_entropy.h"
#include "cuda/kernels/row_reduce.cuh"

namespace kiln::cuda::kern {
namespace {

constexpr int64_t kWarpRowMaxC = 1024;  // wider rows take a block each
constexpr int kBlockRowThreads = 512;

__device__ void report_bad_target(CrossEntropyError* err, int64_t target, int64_t row, int64_t C) {
  if (atomicCAS(&err->state, 0, 1) != 0) return;  // an earlier bad row is already reported
  err->target = target;
  err->row = row;
  err->classes = C;
  __threadfence_system();
  *reinterpret_cast<volatile int*>(&err->state) = 2;
}

template <class T, int kRowThreads>
__global__ void cross_entropy_kernel(const T* x, const int64_t* target, T* loss, T* lse, int64_t N, int64_t C,
                                     int64_t ignore_index, opmath_t<T> s, CrossEntropyError* err) {
  using M = opmath_t<T>;
  int64_t row;
  int lane;
  if (!row_and_lane<kRowThreads>(N, row, lane)) return;
  const T* xr = x + row * C;
  M mx = -INFINITY, sx = 0;
  for (int64_t i = lane; i < C; i += kRowThreads) {
    const M v = to_math(xr[i]);
    mx = nan_max(mx, v);
    sx += v;
  }
  mx = row_max<kRowThreads>(mx);
  // An all -inf row has lse -inf (as log_softmax): keep the max out of the exp then.
  const M shift = isfinite(mx) ? mx : M(0);
  M se = 0;
  for (int64_t i = lane; i < C; i += kRowThreads) se += exp(to_math(xr[i]) - shift);
  se = row_sum<kRowThreads>(se);
  if (s != M(0)) sx = row_sum<kRowThreads>(sx);
  if (lane != 0) return;
  const M l = shift + ::log(se);
  lse[row] = from_math<T>(l);
  const int64_t t = target[row];
  if (t == ignore_index) {
    loss[row] = from_math<T>(M(0));
  } else if (t < 0 || t >= C) {
    loss[row] = from_math<T>(M(NAN));
    report_bad_target(err, t, row, C);
  } else {
    M v = l - (M(1) - s) * to_math(xr[t]);
    if (s != M(0)) v -= s * sx / static_cast<M>(C);
    loss[row] = from_math<T>(v);
  }
}

template <class T>
__global__ void cross_entropy_backward_kernel(T* gx, const T* g, const T* x, const T* lse, const int64_t* target,
                                              int64_t N, int64_t C, int64_t ignore_index, opmath_t<T> s) {
  using M = opmath_t<T>;
  const int64_t total = N * C, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const M uniform = s / static_cast<M>(C);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t row = i / C, c = i - row * C;
    const int64_t t = target[row];
    M v;
    if (t == ignore_index) v = 0;
    else if (t < 0 || t >= C) v = NAN;
    else {
      v = exp(to_math(x[i]) - to_math(lse[row])) - uniform;
      if (c == t) v -= M(1) - s;
      v *= to_math(g[row]);
    }
    gx[i] = from_math<T>(v);
  }
}

template <class T, int kRowThreads>
void forward(const void* x, const int64_t* target, void* loss, void* lse, int64_t N, int64_t C, int64_t ignore_index,
             double s, CrossEntropyError* err, CUstream_st* stream) {
  cross_entropy_kernel<T, kRowThreads><<<row_grid<kRowThreads>(N), row_block<kRowThreads>(), 0, stream>>>(
      static_cast<const T*>(x), target, static_cast<T*>(loss), static_cast<T*>(lse), N, C, ignore_index,
      static_cast<opmath_t<T>>(s), err);
}

}  // namespace

void launch_cross_entropy(ScalarType type, const void* logits, const int64_t* target, void* loss, void* lse, int64_t N,
                          int64_t C, int64_t ignore_index, double smoothing, CrossEntropyError* err,
                          CUstream_st* stream) {
  dispatch_floating(type, [&]<class T>() {
    if (C <= kWarpRowMaxC) forward<T, 32>(logits, target, loss, lse, N, C, ignore_index, smoothing, err, stream);
    else forward<T, kBlockRowThreads>(logits, target, loss, lse, N, C, ignore_index, smoothing, err, stream);
  });
}

void launch_cross_entropy_backward(ScalarType type, void* grad_logits, const void* grad_loss, const void* logits,
                                   const void* lse, const int64_t* target, int64_t N, int64_t C, int64_t ignore_index,
                                   double smoothing, CUstream_st* stream) {
  constexpr int kThreads = 256;
  const int64_t blocks = (N * C + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
  dispatch_floating(type, [&]<class T>() {
    cross_entropy_backward_kernel<T><<<grid, kThreads, 0, stream>>>(
        static_cast<T*>(grad_logits), static_cast<const T*>(grad_loss), static_cast<const T*>(logits),
        static_cast<const T*>(lse), target, N, C, ignore_index, static_cast<opmath_t<T>>(smoothing));
  });
}

}  // namespace kiln::cuda::kern
