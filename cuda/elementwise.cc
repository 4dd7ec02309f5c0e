// Host side of the CUDA fill/copy/unary/binary/compare/where/arange kernels: turns Tensors into
// coalesced geometry (cuda/kernels/launch.h) and launches on the current stream of the output's
// device. Registered into the same kernel slots as the CPU kernels, whose documented contract
// (core/kernels.h: operands validated by core/ops) they trust.
#include <cuda_runtime_api.h>

#include <array>

#include "core/kernels.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/kernels/launch.h"
#include "cuda/launch_util.h"

namespace kiln::cuda {
namespace {

using kern::ElementwiseArgs;
using kern::ScalarType;

/// The operands' common geometry with size-1 dims dropped and dims merged wherever every operand
/// walks them as one (a contiguous tensor becomes 1-D), so the offset calculator does little.
template <int N>
ElementwiseArgs<N> make_args(const char* op, const std::array<const Tensor*, N>& ts) {
  const Tensor& out = *ts[0];  // every operand has out's shape and device (core's contract)
  ElementwiseArgs<N> a;
  a.numel = out.numel();
  for (int k = 0; k < N; ++k) a.data[k] = ts[k]->data_ptr();
  // Walk the dims from the innermost, keeping those of size > 1 and merging into the kept one
  // when contiguous for all operands.
  int64_t sizes[64];
  int64_t strides[N][64];
  int nd = 0;
  for (int64_t d = out.dim() - 1; d >= 0; --d) {
    const int64_t sz = out.size(d);
    if (sz == 1) continue;
    bool merge = nd > 0;
    for (int k = 0; k < N && merge; ++k) merge = ts[k]->stride(d) == strides[k][nd - 1] * sizes[nd - 1];
    if (merge) {
      sizes[nd - 1] *= sz;
      continue;
    }
    // Backend limits (the kernels' offset calculator has kern::kMaxDims slots); everything else
    // about the operands is the slot's contract, checked by core/ops.
    KILN_CHECK(nd < 64, "{} (cuda): too many dims", op);
    sizes[nd] = sz;
    for (int k = 0; k < N; ++k) strides[k][nd] = ts[k]->stride(d);
    ++nd;
  }
  KILN_CHECK(nd <= kern::kMaxDims, "{} (cuda): {} non-mergeable dims, at most {} supported", op, nd, kern::kMaxDims);
  a.ndim = nd;
  // Stored outermost first, as the offset calculator expects.
  for (int i = 0; i < nd; ++i) {
    a.sizes[i] = sizes[nd - 1 - i];
    for (int k = 0; k < N; ++k) a.strides[k][i] = strides[k][nd - 1 - i];
  }
  a.contiguous = true;
  for (int k = 0; k < N; ++k) a.contiguous = a.contiguous && (nd == 0 || (nd == 1 && a.strides[k][0] == 1));
  return a;
}

void fill_kernel(Tensor& out, const Scalar& value) {
  DeviceGuard g(out.device());
  auto a = make_args<1>("fill", {&out});
  kern::launch_fill(scalar_type(out.dtype()), a, value.to<double>(), value.to<int64_t>(), stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

void copy_kernel(Tensor& out, const Tensor& src) {
  DeviceGuard g(out.device());
  auto a = make_args<2>("copy", {&out, &src});
  kern::launch_copy(scalar_type(out.dtype()), scalar_type(src.dtype()), a, stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

void unary_kernel(const UnaryOp& op, Tensor& out, const Tensor& x) {
  DeviceGuard g(out.device());
  auto a = make_args<2>("unary", {&out, &x});
  kern::launch_unary(op, scalar_type(out.dtype()), a, stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

void unary_backward_kernel(const UnaryOp& op, Tensor& grad_x, const Tensor& grad_y, const Tensor& saved) {
  DeviceGuard g(grad_x.device());
  auto a = make_args<3>("unary_backward", {&grad_x, &grad_y, &saved});
  kern::launch_unary_backward(op, scalar_type(grad_x.dtype()), a, stream_of(grad_x));
  KILN_CUDA_CHECK_LAUNCH();
}

void binary_kernel(BinaryKind kind, Tensor& out, const Tensor& a, const Tensor& b) {
  DeviceGuard g(out.device());
  auto args = make_args<3>("binary", {&out, &a, &b});
  kern::launch_binary(kind, scalar_type(out.dtype()), args, stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

void compare_kernel(CompareKind kind, Tensor& out, const Tensor& a, const Tensor& b) {
  DeviceGuard g(out.device());
  auto args = make_args<3>("compare", {&out, &a, &b});
  kern::launch_compare(kind, scalar_type(a.dtype()), args, stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

void where_kernel(Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  DeviceGuard g(out.device());
  auto args = make_args<4>("where", {&out, &cond, &a, &b});
  kern::launch_where(static_cast<int>(out.element_size()), args, stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

// arange's `out` is contiguous and numeric, and non_finite_check_and_unscale's operands are as
// kernels.h states: core/ops/creation.cc and amp/grad_scaler.cc (their callers) make sure.
void arange_kernel(Tensor& out, double start, double step) {
  DeviceGuard g(out.device());
  kern::launch_arange(scalar_type(out.dtype()), out.data_ptr(), out.numel(), start, step, stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

void non_finite_check_and_unscale_kernel(Tensor& grad, Tensor& found_inf, double inv_scale) {
  DeviceGuard g(grad.device());
  kern::launch_non_finite_check_and_unscale(scalar_type(grad.dtype()), grad.data_ptr(), grad.numel(),
                                            static_cast<float*>(found_inf.data_ptr()), inv_scale, stream_of(grad));
  KILN_CUDA_CHECK_LAUNCH();
  grad.storage()->bump_version();
  found_inf.storage()->bump_version();
}

}  // namespace

KILN_REGISTER_KERNEL(non_finite_check_and_unscale, DeviceType::CUDA, &non_finite_check_and_unscale_kernel);
KILN_REGISTER_KERNEL(compare, DeviceType::CUDA, &compare_kernel);
KILN_REGISTER_KERNEL(where, DeviceType::CUDA, &where_kernel);
KILN_REGISTER_KERNEL(arange, DeviceType::CUDA, &arange_kernel);
KILN_REGISTER_KERNEL(fill, DeviceType::CUDA, &fill_kernel);
KILN_REGISTER_KERNEL(copy, DeviceType::CUDA, &copy_kernel);
KILN_REGISTER_KERNEL(unary, DeviceType::CUDA, &unary_kernel);
KILN_REGISTER_KERNEL(unary_backward, DeviceType::CUDA, &unary_backward_kernel);
KILN_REGISTER_KERNEL(binary, DeviceType::CUDA, &binary_kernel);

}  // namespace kiln::cuda
