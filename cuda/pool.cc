// Host side of the CUDA pooling kernels: contiguous NCHW operands (copied when they are not), max
// pooling's backward accumulated in f32 for 16-bit types. Operands are as core/kernels.h states
// (4-D, floating, i64 indices): core/ops/conv.cc checks the input and allocates the outputs, and
// the backward gets the forward's geometry from autograd.
#include "core/dense.h"
#include "core/kernels.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/kernels/launch.h"
#include "cuda/launch_util.h"
#include "cuda/stream.h"

namespace kiln::cuda {
namespace {

using kern::PoolShape;

PoolShape shape_of(const Tensor& in, const Tensor& out) {
  return {in.size(0) * in.size(1), in.size(2), in.size(3), out.size(2), out.size(3)};
}

void max_pool2d_kernel(Tensor& out, Tensor& indices, const Tensor& x, const Pool2dParams& p) {
  const PoolShape s = shape_of(x, out);
  DeviceGuard g(out.device());
  Tensor xc = dense(x), oc = writable(out), ic = writable(indices);
  kern::launch_max_pool2d(scalar_type(x.dtype()), xc.data_ptr(), oc.data_ptr(), static_cast<int64_t*>(ic.data_ptr()),
                          s, p, stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
  write_back(out, oc);
  write_back(indices, ic);
}

void max_pool2d_backward_kernel(Tensor& grad_x, const Tensor& grad_out, const Tensor& indices) {
  const PoolShape s = shape_of(grad_x, grad_out);
  const DType acc = grad_x.dtype() == kFloat64 ? kFloat64 : kFloat32;
  DeviceGuard g(grad_x.device());
  Tensor go = dense(grad_out), ic = dense(indices);
  Tensor a = grad_x.is_contiguous() && grad_x.dtype() == acc ? grad_x : make_tensor(grad_x.sizes(), acc, grad_x.device());
  kernels::fill[a.device()](a, 0);
  kern::launch_max_pool2d_backward(scalar_type(grad_x.dtype()), go.data_ptr(), static_cast<const int64_t*>(ic.data_ptr()),
                                   a.data_ptr(), s.planes, s.H * s.W, s.OH * s.OW, stream_of(grad_x));
  KILN_CUDA_CHECK_LAUNCH();
  write_back(grad_x, a);
}

void avg_pool2d_kernel(Tensor& out, const Tensor& x, const Pool2dParams& p) {
  const PoolShape s = shape_of(x, out);
  DeviceGuard g(out.device());
  Tensor xc = dense(x), oc = writable(out);
  kern::launch_avg_pool2d(scalar_type(x.dtype()), xc.data_ptr(), oc.data_ptr(), s, p, stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
  write_back(out, oc);
}

void avg_pool2d_backward_kernel(Tensor& grad_x, const Tensor& grad_out, const Pool2dParams& p) {
  const PoolShape s = shape_of(grad_x, grad_out);
  DeviceGuard g(grad_x.device());
  Tensor go = dense(grad_out), gx = writable(grad_x);
  kern::launch_avg_pool2d_backward(scalar_type(grad_x.dtype()), go.data_ptr(), gx.data_ptr(), s, p,
                                   stream_of(grad_x));
  KILN_CUDA_CHECK_LAUNCH();
  write_back(grad_x, gx);
}

}  // namespace

KILN_REGISTER_KERNEL(max_pool2d, DeviceType::CUDA, &max_pool2d_kernel);
KILN_REGISTER_KERNEL(max_pool2d_backward, DeviceType::CUDA, &max_pool2d_backward_kernel);
KILN_REGISTER_KERNEL(avg_pool2d, DeviceType::CUDA, &avg_pool2d_kernel);
KILN_REGISTER_KERNEL(avg_pool2d_backward, DeviceType::CUDA, &avg_pool2d_backward_kernel);

}  // namespace kiln::cuda
