// Host side of the CUDA index kernels (index_select, gather: indexed reads; index_add,
// scatter_add: atomic indexed adds). Dtypes, devices, shapes and index ranges were checked by the
// op before the kernel runs (core/ops/index.cc); here the geometry is laid out for the two .cu
// kernels. The checks left are this backend's own limits: at most kMaxDims dims, no bool adds.
#include "core/kernels.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/kernels/launch.h"
#include "cuda/launch_util.h"
#include "cuda/stream.h"

namespace kiln::cuda {
namespace {

using kern::ElementwiseArgs;

/// Walks `shape`: operand 0 `walked`, 1 the index, 2 `other`. `zero0`/`zero2` take the indexed
/// dim's stride out of operand 0 or 2; a 1-D index (index_select/index_add) advances only along
/// `dim`.
ElementwiseArgs<3> layout(const char* op, const Shape& shape, const Tensor& walked, const Tensor& index,
                          const Tensor& other, int64_t dim, bool zero0, bool zero2, bool index_1d) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  KILN_CHECK(nd <= kern::kMaxDims, "{} (cuda): {} dims, at most {} supported", op, nd, kern::kMaxDims);
  ElementwiseArgs<3> a;
  a.ndim = static_cast<int>(nd);
  a.numel = 1;
  for (int64_t d = 0; d < nd; ++d) {
    a.sizes[d] = shape[d];
    a.numel *= shape[d];
    a.strides[0][d] = zero0 && d == dim ? 0 : walked.stride(d);
    a.strides[1][d] = index_1d ? (d == dim && index.dim() > 0 ? index.stride(0) : 0) : index.stride(d);
    a.strides[2][d] = zero2 && d == dim ? 0 : other.stride(d);
  }
  a.data[0] = walked.data_ptr();
  a.data[1] = index.data_ptr();
  a.data[2] = other.data_ptr();
  return a;
}

void index_select_kernel(Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  if (out.numel() == 0) return;
  DeviceGuard g(out.device());
  auto a = layout("index_select", out.sizes(), out, index, x, dim, false, true, true);
  kern::launch_index_gather(static_cast<int>(out.element_size()), a, x.stride(dim), stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

void gather_kernel(Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  if (out.numel() == 0) return;
  DeviceGuard g(out.device());
  auto a = layout("gather", index.sizes(), out, index, x, dim, false, true, false);
  kern::launch_index_gather(static_cast<int>(out.element_size()), a, x.dim() == 0 ? 0 : x.stride(dim),
                            stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

/// The CUDA atomic adds have no bool version.
void check_add(const Tensor& out, const char* op) {
  KILN_CHECK(out.dtype() != kBool, "{} (cuda): bool tensors are not supported", op);
}

void index_add_kernel(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  check_add(out, "index_add");
  if (src.numel() == 0) return;
  DeviceGuard g(out.device());
  auto a = layout("index_add", src.sizes(), out, index, src, dim, true, false, true);
  kern::launch_index_scatter_add(static_cast<kern::ScalarType>(out.dtype()), a, out.stride(dim), stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

void scatter_add_kernel(Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  check_add(out, "scatter_add");
  if (index.numel() == 0) return;
  DeviceGuard g(out.device());
  auto a = layout("scatter_add", index.sizes(), out, index, src, dim, true, false, false);
  kern::launch_index_scatter_add(static_cast<kern::ScalarType>(out.dtype()), a, out.dim() == 0 ? 0 : out.stride(dim),
                                 stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace

KILN_REGISTER_KERNEL(index_select, DeviceType::CUDA, &index_select_kernel);
KILN_REGISTER_KERNEL(index_add, DeviceType::CUDA, &index_add_kernel);
KILN_REGISTER_KERNEL(gather, DeviceType::CUDA, &gather_kernel);
KILN_REGISTER_KERNEL(scatter_add, DeviceType::CUDA, &scatter_add_kernel);

}  // namespace kiln::cuda
