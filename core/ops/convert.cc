// Copies and conversions: clone, contiguous, to(dtype), to(device), copy_ and fill_.
#include "core/autograd_meta.h"
#include "core/kernels.h"
#include "core/op_table.h"
#include "core/ops.h"
#include "core/ops/inplace.h"

namespace kiln {
namespace {

Tensor clone_forward(const Tensor& x) {
  Tensor out = make_tensor(x.sizes(), x.dtype(), x.device());
  kernels::copy[x.device()](out, x);
  return out;
}

Tensor to_dtype_forward(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = make_tensor(x.sizes(), dtype, x.device());
  kernels::copy[x.device()](out, x);
  return out;
}

Tensor to_device_forward(const Tensor& x, Device device) {
  if (x.device() == device) return x;
  Tensor src = x.is_contiguous() ? x : clone_forward(x);
  Tensor out = make_tensor(x.sizes(), x.dtype(), device);
  Device accel = device.is_cpu() ? x.device() : device;
  kernels::copy_across_devices[accel](out, src);
  return out;
}

}  // namespace
}  // namespace kiln

KILN_DEFINE_OP(clone, &kiln::clone_forward)
KILN_DEFINE_OP(to_dtype, &kiln::to_dtype_forward)
KILN_DEFINE_OP(to_device, &kiln::to_device_forward)

namespace kiln {

Tensor clone(const Tensor& x) { return op::clone(x); }
Tensor contiguous(const Tensor& x) { return x.is_contiguous() ? x : op::clone(x); }
Tensor to(const Tensor& x, DType dtype) { return op::to_dtype(x, dtype); }
Tensor to(const Tensor& x, Device device) { return op::to_device(x, device); }

Tensor pin_memory(const Tensor& x) {
  KILN_CHECK(x.device().is_cpu(), "pin_memory: tensor is on {}, expected the CPU", x.device());
  Allocator* pinned = pinned_allocator();
  if (pinned == nullptr || device_count(DeviceType::CUDA) == 0) return contiguous(x);
  const size_t nbytes = static_cast<size_t>(x.numel()) * x.element_size();
  void* p = pinned->allocate(nbytes, kCPU);
  auto storage = std::make_shared<StorageImpl>(p, nbytes, kCPU, [pinned, nbytes](void* q) {
    pinned->deallocate(q, nbytes, kCPU);
  });
  Tensor out(std::make_shared<TensorImpl>(storage, x.sizes(), contiguous_strides(x.sizes()), 0, x.dtype()));
  kernels::copy[kCPU](out, x);
  return out;
}

Tensor Tensor::clone() const { return kiln::clone(*this); }
Tensor Tensor::contiguous() const { return kiln::contiguous(*this); }
Tensor Tensor::to(DType dtype) const { return kiln::to(*this, dtype); }
Tensor Tensor::to(Device device) const { return kiln::to(*this, device); }
Tensor Tensor::to(Device device, DType dtype) const { return kiln::to(kiln::to(*this, device), dtype); }

Tensor& fill_(Tensor& x, const Scalar& value) {
  check_inplace(x, "fill_");
  if (inplace_needs_grad(x, Tensor())) {
    commit_inplace(x, full(x.sizes(), value, TensorOptions(x.dtype()).device(x.device())), "fill_");
    return x;
  }
  kernels::fill[x.device()](x, value);
  x.storage()->bump_version();
  return x;
}

Tensor& copy_(Tensor& dst, const Tensor& src) {
  check_inplace(dst, "copy_");
  Shape b = broadcast_shapes(dst.sizes(), src.sizes(), "copy_");
  KILN_CHECK(b == dst.sizes(), "copy_: source of shape {} cannot be broadcast to destination shape {}",
             src.sizes(), dst.sizes());
  // An integer destination cannot carry a gradient (as in PyTorch): its copy is never recorded.
  if (is_floating(dst.dtype()) && inplace_needs_grad(dst, src)) {
    // d(dst)/d(src) is the identity through the device move, the cast and the broadcast.
    Tensor r = src.to(dst.device());
    if (is_floating(r.dtype()) && is_floating(dst.dtype())) r = r.to(dst.dtype());
    commit_inplace(dst, r.expand(dst.sizes()), "copy_");
    return dst;
  }
  Tensor s = src.device() == dst.device() ? src : src.to(dst.device());
  kernels::copy[dst.device()](dst, s.expand(dst.sizes()));
  dst.storage()->bump_version();
  return dst;
}

void set_data(Tensor& t, const Tensor& data) {
  TensorImpl* dst = t.unsafe_impl();
  const TensorImpl* src = data.unsafe_impl();
  KILN_CHECK(dst != nullptr && src != nullptr, "set_data: undefined tensor");
  const bool same_kind = dst->dtype == src->dtype && t.device() == data.device() && dst->sizes == src->sizes;
  dst->storage = src->storage;
  dst->sizes = src->sizes;
  dst->strides = src->strides;
  dst->offset = src->offset;
  dst->dtype = src->dtype;
  if (!same_kind && dst->autograd) dst->autograd->grad = Tensor();  // an old grad no longer fits
}

Tensor& Tensor::fill_(const Scalar& value) { return kiln::fill_(*this, value); }
Tensor& Tensor::zero_() { return kiln::fill_(*this, 0); }
Tensor& Tensor::copy_(const Tensor& src) { return kiln::copy_(*this, src); }

}  // namespace kiln
