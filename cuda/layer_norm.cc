// Host side of the fused CUDA layer norm (cuda/kernels/layer_norm.cu): contiguous operands
// (copied when they are not), statistics in the math type (f32 for f16/bf16, else x's dtype),
// launches on the current stream. grad_weight / grad_bias go through a scratch of per-chunk
// partial sums so the reduction over rows is deterministic and needs no atomics.
#include "core/dense.h"
#include "core/kernels.h"
#include "core/ops/layer_norm.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/kernels/layer_norm.h"
#include "cuda/launch_util.h"
#include "cuda/stream.h"

namespace kiln::cuda {
namespace {

void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

// Shapes and dtypes are the slots' contract (core/kernels.h): core/ops/layer_norm.cc checks the
// forward's operands and allocates its outputs; autograd/functions/layer_norm.cc hands the
// backward the forward's tensors and a gradient of x's shape and dtype.

void layer_norm_kernel(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight,
                       const Tensor& bias, double eps) {
  const int64_t M = x.size(0), N = x.size(1);
  if (M == 0 || N == 0) return;
  DeviceGuard g(x.device());
  const Tensor xc = dense(x), w = dense(weight), b = dense(bias);
  Tensor o = writable(out), mc = writable(mean), rc = writable(rstd);
  kern::launch_layer_norm(scalar_type(x.dtype()), xc.data_ptr(), ptr(w), ptr(b), o.data_ptr(), mc.data_ptr(),
                          rc.data_ptr(), M, N, eps, stream_of(x));
  KILN_CUDA_CHECK_LAUNCH();
  write_back(out, o);
  write_back(mean, mc);
  write_back(rstd, rc);
}

void layer_norm_backward_kernel(Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias, const Tensor& grad_out,
                                const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight) {
  const int64_t M = x.size(0), N = x.size(1);
  if (N == 0) return;
  DeviceGuard g(x.device());
  if (M == 0) {
    if (grad_weight.defined()) kernels::fill[x.device()](grad_weight, Scalar(0));
    if (grad_bias.defined()) kernels::fill[x.device()](grad_bias, Scalar(0));
    return;
  }
  const Tensor gy = dense(grad_out), xc = dense(x), mc = dense(mean), rc = dense(rstd), w = dense(weight);
  if (grad_x.defined()) {
    Tensor gx = writable(grad_x);
    kern::launch_layer_norm_backward_x(scalar_type(x.dtype()), gy.data_ptr(), xc.data_ptr(), mc.data_ptr(),
                                       rc.data_ptr(), ptr(w), gx.data_ptr(), M, N, stream_of(x));
    KILN_CUDA_CHECK_LAUNCH();
    write_back(grad_x, gx);
  }
  if (grad_weight.defined() || grad_bias.defined()) {
    Tensor gw = writable(grad_weight), gb = writable(grad_bias);
    Tensor partials =
        make_tensor({2 * kern::layer_norm_param_chunks(M) * N}, layer_norm_stats_dtype(x.dtype()), x.device());
    kern::launch_layer_norm_backward_params(scalar_type(x.dtype()), gy.data_ptr(), xc.data_ptr(), mc.data_ptr(),
                                            rc.data_ptr(), ptr(gw), ptr(gb), partials.data_ptr(), M, N,
                                            stream_of(x));
    KILN_CUDA_CHECK_LAUNCH();
    write_back(grad_weight, gw);
    write_back(grad_bias, gb);
  }
}

}  // namespace

KILN_REGISTER_KERNEL(layer_norm, DeviceType::CUDA, &layer_norm_kernel);
KILN_REGISTER_KERNEL(layer_norm_backward, DeviceType::CUDA, &layer_norm_backward_kernel);

}  // namespace kiln::cuda
