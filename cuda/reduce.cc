// Host side of the CUDA reductions (sum, mean, max, min, prod over any dims; argmax/argmin) and softmax /
// log_softmax (forward and backward, any dim): the reduced dims are moved last (a copy only
// when that layout is not already contiguous) and the .cu kernels work on [rows, R] rows, except
// that a contiguous input reduced over one block of leading dims is reduced down its columns; the
// result is copied into `out` when out is strided or of another dtype. Operands are as
// core/kernels.h states: core/ops/reduce.cc wraps and de-duplicates the dims, picks the dtypes,
// refuses max/min (and argmax/argmin) over a zero-size dim and allocates `out`; softmax's backward
// gets the forward's output and a gradient of its shape (autograd/functions/reduce.cc).
#include <algorithm>
#include <limits>
#include <vector>

#include "core/kernels.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/kernels/launch.h"
#include "cuda/launch_util.h"
#include "cuda/stream.h"

namespace kiln::cuda {
namespace {

using kern::ScalarType;

/// `t` seen with the dims flagged in `moved` last (kept order otherwise): sizes and strides.
void permuted(const Tensor& t, const std::vector<bool>& moved, Shape& sizes, Shape& strides) {
  sizes.clear();
  strides.clear();
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t d = 0; d < t.dim(); ++d)
      if (moved[d] == (pass == 1)) {
        sizes.push_back(t.size(d));
        strides.push_back(t.stride(d));
      }
}

/// `t` with the flagged dims last, contiguous and of dtype `dt` (a copy unless already so).
Tensor moved_last(const Tensor& t, const std::vector<bool>& moved, DType dt) {
  Shape sizes, strides;
  permuted(t, moved, sizes, strides);
  Tensor v = make_view(t, sizes, strides, t.offset());
  if (v.is_contiguous() && dt == t.dtype()) return v;
  Tensor c = make_tensor(sizes, dt, t.device());
  kernels::copy[t.device()](c, v);
  return c;
}

void reduce_kernel(ReduceKind kind, Tensor& out, const Tensor& x, const IntList& dims) {
  if (out.numel() == 0) return;
  const int64_t nd = x.dim();
  std::vector<bool> reduced(nd, false);
  for (int64_t d : dims) reduced[d] = true;
  int64_t R = 1;
  for (int64_t d = 0; d < nd; ++d) if (reduced[d]) R *= x.size(d);
  DeviceGuard g(out.device());
  if (R == 0) {  // an empty reduction gives the identity (mean: 0/0 = NaN); never max or min
    const Scalar v = kind == ReduceKind::mean ? Scalar(std::numeric_limits<double>::quiet_NaN())
                     : kind == ReduceKind::prod ? Scalar(1) : Scalar(0);
    kernels::fill[out.device()](out, v);
    return;
  }
  const int64_t rows = out.numel();
  const bool direct = out.is_contiguous();
  Tensor oc = direct ? out : make_tensor(out.sizes(), out.dtype(), out.device());
  // A contiguous x whose reduced dims are one block with kept dims after it ([A, R, C], C > 1):
  // reduced where it lies, down the columns, instead of being moved last by a transposing copy.
  int64_t first = nd, last = -1;
  for (int64_t d = 0; d < nd; ++d)
    if (reduced[d]) first = std::min(first, d), last = d;
  const bool block = last >= 0 && last - first + 1 == static_cast<int64_t>(std::count(reduced.begin(), reduced.end(), true));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < first; ++d) outer *= x.size(d);
  for (int64_t d = last + 1; d < nd; ++d) inner *= x.size(d);
  if (x.is_contiguous() && block && inner >= 32 && outer <= 65535) {
    const int64_t chunks = kern::reduce_column_chunks(outer * inner, R);
    Tensor partials = chunks > 1 ? make_tensor({rows * chunks}, kInt64, out.device()) : Tensor();
    kern::launch_reduce_columns(kind, scalar_type(x.dtype()), scalar_type(out.dtype()), x.data_ptr(), oc.data_ptr(),
                                outer, R, inner, partials.defined() ? partials.data_ptr() : nullptr, stream_of(out));
    KILN_CUDA_CHECK_LAUNCH();
    if (!direct) kernels::copy[out.device()](out, oc);
    return;
  }
  Tensor xc = moved_last(x, reduced, x.dtype());
  const int64_t chunks = kern::reduce_chunks(rows, R);
  Tensor partials = chunks > 1 ? make_tensor({rows * chunks}, kInt64, out.device()) : Tensor();
  kern::launch_reduce(kind, scalar_type(x.dtype()), scalar_type(out.dtype()), xc.data_ptr(), oc.data_ptr(), rows, R,
                      partials.defined() ? partials.data_ptr() : nullptr, stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
  if (!direct) kernels::copy[out.device()](out, oc);
}

void arg_reduce_kernel(ReduceKind kind, Tensor& out, const Tensor& x, int64_t dim) {
  const bool is_max = kind == ReduceKind::max;
  if (out.numel() == 0) return;
  const int64_t nd = x.dim();
  const int64_t D = nd == 0 ? 1 : x.size(dim);
  std::vector<bool> moved(nd, false);
  if (nd > 0) moved[dim] = true;
  DeviceGuard g(out.device());
  Tensor xc = moved_last(x, moved, x.dtype());
  const bool direct = out.is_contiguous();
  Tensor oc = direct ? out : make_tensor(out.sizes(), kInt64, out.device());
  kern::launch_arg_reduce(is_max, scalar_type(x.dtype()), xc.data_ptr(), static_cast<int64_t*>(oc.data_ptr()),
                          out.numel(), D, stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
  if (!direct) kernels::copy[out.device()](out, oc);
}

/// Runs `compute(rows, D, y_contiguous)` on [rows, D] operands with `dim` moved last, then
/// copies the result into `out` (through the same permutation) unless it was written in place.
template <class F>
void along_last(Tensor& out, int64_t dim, DType dt, const F& compute) {
  const int64_t nd = out.dim();
  std::vector<bool> moved(nd, false);
  if (nd > 0) moved[dim] = true;
  const int64_t D = nd > 0 ? out.size(dim) : 1;
  const int64_t rows = D == 0 ? 0 : out.numel() / D;
  Shape sizes, strides;
  permuted(out, moved, sizes, strides);
  Tensor ov = make_view(out, sizes, strides, out.offset());
  const bool direct = ov.is_contiguous() && out.dtype() == dt;
  Tensor yc = direct ? ov : make_tensor(sizes, dt, out.device());
  compute(moved, rows, D, yc);
  if (!direct) kernels::copy[out.device()](ov, yc);
}

void softmax_kernel(Tensor& out, const Tensor& x, int64_t dim, bool log) {
  if (out.numel() == 0) return;
  DeviceGuard g(out.device());
  along_last(out, dim, x.dtype(), [&](const std::vector<bool>& moved, int64_t rows, int64_t D, Tensor& y) {
    Tensor xc = moved_last(x, moved, x.dtype());
    kern::launch_softmax(scalar_type(x.dtype()), xc.data_ptr(), y.data_ptr(), rows, D, log, stream_of(out));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

void softmax_backward_kernel(Tensor& grad_x, const Tensor& grad_y, const Tensor& y, int64_t dim, bool log) {
  if (grad_x.numel() == 0) return;
  DeviceGuard g(grad_x.device());
  const DType dt = y.dtype();
  along_last(grad_x, dim, dt, [&](const std::vector<bool>& moved, int64_t rows, int64_t D, Tensor& gx) {
    Tensor gyc = moved_last(grad_y, moved, dt), yc = moved_last(y, moved, dt);
    kern::launch_softmax_backward(scalar_type(dt), gyc.data_ptr(), yc.data_ptr(), gx.data_ptr(), rows, D, log,
                                  stream_of(grad_x));
    KILN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

KILN_REGISTER_KERNEL(reduce, DeviceType::CUDA, &reduce_kernel);
KILN_REGISTER_KERNEL(arg_reduce, DeviceType::CUDA, &arg_reduce_kernel);
KILN_REGISTER_KERNEL(softmax, DeviceType::CUDA, &softmax_kernel);
KILN_REGISTER_KERNEL(softmax_backward, DeviceType::CUDA, &softmax_backward_kernel);

}  // namespace kiln::cuda
