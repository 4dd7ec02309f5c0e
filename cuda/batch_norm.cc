// Training-mode batch norm and its backward on CUDA through cuDNN's batch-norm API
// (cudnnBatchNormalizationForwardTraining / cudnnBatchNormalizationBackward, mode
// CUDNN_BATCHNORM_SPATIAL). x [N, C, *] is described to cuDNN as the NCHW tensor [N, C, S, 1]
// (S = product of the trailing dims): spatial mode reduces over N, H and W alike, so one 4-D
// descriptor serves every rank. Statistics, scale and bias are in the descriptor cuDNN derives
// (f32, f64 for f64 x); a missing weight/bias is passed as ones/zeros, and parameters or
// running statistics of another dtype or layout go through f32/f64 copies.
//
// Semantics are PyTorch's: the saved invstd is 1 / sqrt(biased variance + eps), the running
// variance takes the unbiased one (cuDNN's own update), momentum is cuDNN's
// exponentialAverageFactor. CUDNN_BATCHNORM_SPATIAL_PERSISTENT is not used: cuDNN documents
// that it may overflow on some inputs, and it pays mainly for NHWC layouts Kiln does not have.
// Shapes cuDNN cannot run (N > 880801, or 2^31 elements or more: its 32-bit indexing; the limits
// PyTorch also routes around) fail with an error naming them; there is no fallback kernel.
#include <cudnn.h>

#include <algorithm>
#include <climits>

#include "core/dense.h"
#include "core/kernels.h"
#include "core/ops/batch_norm.h"
#include "cuda/cudnn_handle.h"
#include "cuda/device.h"
#include "cuda/error.h"

namespace kiln::cuda {
namespace {

constexpr int64_t kMaxBatch = 880801;  // spatial training mode fails beyond this batch size

cudnnDataType_t data_type(DType t, const char* op) {
  switch (t) {
    case kFloat32: return CUDNN_DATA_FLOAT;
    case kFloat64: return CUDNN_DATA_DOUBLE;
    case kFloat16: return CUDNN_DATA_HALF;
    case kBFloat16: return CUDNN_DATA_BFLOAT16;
    default: fail("{} (cuda): dtype {} is not supported (floating types only)", op, t);
  }
}

/// x's descriptor as [N, C, S, 1] and the per-channel descriptor cuDNN derives from it. The batch
/// and element limits (and the eps floor below) are cuDNN's, so they are checked here; the slot's
/// contract (shapes, dtypes, running statistics both or neither) is core/ops/batch_norm.cc's.
struct Descs {
  cudnnTensorDescriptor_t x = nullptr, bn = nullptr;
  Descs(const Tensor& t, const char* op) {
    int64_t s = 1;
    for (int64_t d = 2; d < t.dim(); ++d) s *= t.size(d);
    KILN_CHECK(t.size(0) <= kMaxBatch,
               "{} (cuda): cuDNN's spatial batch norm supports a batch of at most {}, got input shape {}", op,
               kMaxBatch, t.sizes());
    KILN_CHECK(t.numel() < INT_MAX,
               "{} (cuda): input shape {} has {} elements; cuDNN's batch norm indexes with 32 bits", op, t.sizes(),
               t.numel());
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x));
    KILN_CUDNN_CHECK(cudnnCreateTensorDescriptor(&bn));
    KILN_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, data_type(t.dtype(), op),
                                                static_cast<int>(t.size(0)), static_cast<int>(t.size(1)),
                                                static_cast<int>(s), 1));
    KILN_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(bn, x, CUDNN_BATCHNORM_SPATIAL));
  }
  ~Descs() {
    cudnnDestroyTensorDescriptor(bn);
    cudnnDestroyTensorDescriptor(x);
  }
  Descs(const Descs&) = delete;
  Descs& operator=(const Descs&) = delete;
};

/// A [C] parameter in cuDNN's dtype: `p` (converted if needed), or `fill` everywhere when undefined.
Tensor param_or(const Tensor& p, DType dt, double fill, int64_t c, Device device) {
  if (p.defined()) return dense_as(p, dt);
  Tensor t = make_tensor({c}, dt, device);
  kernels::fill[device](t, fill);
  return t;
}

/// Where cuDNN writes a result meant for `dst`: `dst` itself when it has the right dtype and
/// layout, else a scratch tensor that `write_back` copies back.
/// A default-constructed Output is "no result" (a null pointer to cuDNN).
struct Output {
  Tensor dst, buf;
  Output() = default;
  Output(const Tensor& d, DType dt, const Shape& shape, Device device)
      : dst(d), buf(d.defined() && d.is_contiguous() && d.dtype() == dt ? d : make_tensor(shape, dt, device)) {}
  void* ptr() const { return buf.defined() ? buf.data_ptr() : nullptr; }
  void write_back() {
    if (dst.defined() && !buf.is_same(dst)) kernels::copy[dst.device()](dst, buf);
  }
};

void batch_norm_kernel(Tensor& out, Tensor& save_mean, Tensor& save_invstd, const Tensor& x0, const Tensor& weight,
                       const Tensor& bias, Tensor& running_mean, Tensor& running_var, double momentum, double eps) {
  if (x0.numel() == 0) return;
  KILN_CHECK(eps >= CUDNN_BN_MIN_EPSILON, "batch_norm (cuda): cuDNN needs eps >= {}, got {}", CUDNN_BN_MIN_EPSILON,
             eps);
  DeviceGuard guard(x0.device());
  const Device dev = x0.device();
  const DType t = x0.dtype(), pd = batch_norm_stats_dtype(t);
  const Tensor x = dense_as(x0, t);
  const int64_t c = x.size(1);
  Descs desc(x, "batch_norm");
  const Tensor scale = param_or(weight, pd, 1.0, c, dev), shift = param_or(bias, pd, 0.0, c, dev);
  Output y(out, t, x.sizes(), dev), sm(save_mean, pd, {c}, dev), si(save_invstd, pd, {c}, dev);
  const bool track = running_mean.defined();
  Output rm, rv;
  if (track) {
    rm = Output(running_mean, pd, {c}, dev);
    rv = Output(running_var, pd, {c}, dev);
  }
  // rm/rv are read as well as written: a converted copy must start from the current values.
  if (track && !rm.buf.is_same(running_mean)) kernels::copy[dev](rm.buf, running_mean);
  if (track && !rv.buf.is_same(running_var)) kernels::copy[dev](rv.buf, running_var);
  KILN_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      cudnn_handle_for(x), CUDNN_BATCHNORM_SPATIAL, kCudnnOne.for_type(t), kCudnnZero.for_type(t), desc.x, x.data_ptr(),
      desc.x, y.ptr(), desc.bn, scale.data_ptr(), shift.data_ptr(), momentum, rm.ptr(), rv.ptr(), eps, sm.ptr(),
      si.ptr()));
  for (Output* o : {&y, &sm, &si, &rm, &rv}) o->write_back();
}

void batch_norm_backward_kernel(Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias, const Tensor& grad_out,
                                const Tensor& x0, const Tensor& weight, const Tensor& save_mean,
                                const Tensor& save_invstd) {
  if (x0.numel() == 0) {
    for (Tensor* g : {&grad_x, &grad_weight, &grad_bias})
      if (g->defined()) kernels::fill[g->device()](*g, 0);
    return;
  }
  DeviceGuard guard(x0.device());
  const Device dev = x0.device();
  const DType t = x0.dtype(), pd = batch_norm_stats_dtype(t);
  const Tensor x = dense_as(x0, t), gy = dense_as(grad_out, t);
  const int64_t c = x.size(1);
  Descs desc(x, "batch_norm_backward");
  const Tensor scale = param_or(weight, pd, 1.0, c, dev);
  const Tensor mean = dense_as(save_mean, pd), invstd = dense_as(save_invstd, pd);
  // cuDNN always writes all three gradients; the ones nobody asked for land in scratch.
  Output gx(grad_x, t, x.sizes(), dev), gw(grad_weight, pd, {c}, dev), gb(grad_bias, pd, {c}, dev);
  // The saved statistics are passed, so cuDNN does not recompute invstd and never reads epsilon
  // for it; the kernel contract carries none, so a small valid value is passed.
  const double eps = std::max(CUDNN_BN_MIN_EPSILON, 1e-5);
  KILN_CUDNN_CHECK(cudnnBatchNormalizationBackward(
      cudnn_handle_for(x), CUDNN_BATCHNORM_SPATIAL, kCudnnOne.for_type(t), kCudnnZero.for_type(t),
      kCudnnOne.for_type(t), kCudnnZero.for_type(t), desc.x, x.data_ptr(), desc.x, gy.data_ptr(), desc.x, gx.ptr(),
      desc.bn, scale.data_ptr(), gw.ptr(), gb.ptr(), eps, mean.data_ptr(), invstd.data_ptr()));
  for (Output* o : {&gx, &gw, &gb}) o->write_back();
}

}  // namespace

KILN_REGISTER_KERNEL(batch_norm, DeviceType::CUDA, &batch_norm_kernel);
KILN_REGISTER_KERNEL(batch_norm_backward, DeviceType::CUDA, &batch_norm_backward_kernel);

}  // namespace kiln::cuda
