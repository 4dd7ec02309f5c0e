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

void check_x(const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight, const char* op) {
  KILN_CHECK(x.dim() == 2 && is_floating(x.dtype()), "{}: expected floating x [M, N], got {} {}", op, x.dtype(),
             x.sizes());
  const DType sd = layer_norm_stats_dtype(x.dtype());
  KILN_CHECK(mean.dtype() == sd && rstd.dtype() == sd && mean.numel() == x.size(0) && rstd.numel() == x.size(0),
             "{}: mean and rstd must be {} [{}], got {} {} and {} {}", op, sd, x.size(0), mean.dtype(), mean.sizes(),
             rstd.dtype(), rstd.sizes());
  if (weight.defined())
    KILN_CHECK(weight.dtype() == x.dtype() && weight.numel() == x.size(1),
               "{}: expected weight {} [{}], got {} {}", op, x.dtype(), x.size(1), weight.dtype(), weight.sizes());
}

void layer_norm_kernel(Tensor& out, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& weight,
                       const Tensor& bias, double eps) {
  check_x(x, mean, rstd, weight, "layer_norm");
  if (bias.defined())
    KILN_CHECK(bias.dtype() == x.dtype() && bias.numel() == x.size(1), "layer_norm: expected bias {} [{}], got {} {}",
               x.dtype(), x.size(1), bias.dtype(), bias.sizes());
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
  check_x(x, mean, rstd, weight, "layer_norm_backward");
  KILN_CHECK(grad_out.sizes() == x.sizes() && grad_out.dtype() == x.dtype(),
             "layer_norm_backward: grad_out {} {} does not match x {} {}", grad_out.dtype(), grad_out.sizes(),
             x.dtype(), x.sizes());
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
