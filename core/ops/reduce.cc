// Reductions and softmax: the `reduce` and `softmax` primitives (autograd/ holds their backward)
// and the public ops built on them. max/min(dim) take their values with gather and var/std/
// logsumexp are composites, so their gradients come from the primitives they are made of.
// Integer sums and products give i64 (as PyTorch); mean, var and std need a floating input.
// Under autocast the reductions and softmax run in f32 (core/autocast_policy.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/autocast.h"
#include "core/kernels.h"
#include "core/op_table.h"
#include "core/ops.h"

namespace kiln {
namespace {

/// x cast to f32 under autocast when it is f16/bf16 (these ops are fp32-class in the policy).
Tensor fp32(AutocastOp op, const Tensor& x) { return autocast::cast_input(op, x); }

/// Wraps and sorts the dims of a reduction named `op` on a tensor of rank `ndim`; an empty list
/// means every dim. A dim given twice is an error. A 0-dim tensor has no dims to reduce.
IntList normalize_dims(const IntList& dims, int64_t ndim, const char* op) {
  IntList out;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) out.push_back(d);
    return out;
  }
  std::vector<bool> seen(std::max<int64_t>(ndim, 1), false);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, ndim, op);
    KILN_CHECK(!seen[w], "{}: dim {} appears more than once in the list of dims {}", op, w, dims);
    seen[w] = true;
    out.push_back(w);
  }
  std::sort(out.begin(), out.end());
  if (ndim == 0) out.clear();
  return out;
}

/// x's shape with the (normalized) `dims` set to 1, or removed when !keepdim.
Shape reduced_shape(const Shape& shape, const IntList& dims, bool keepdim) {
  Shape out;
  size_t k = 0;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    const bool reduced = k < dims.size() && dims[k] == d;
    if (reduced) ++k;
    if (!reduced) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

int64_t reduced_count(const Shape& shape, const IntList& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= shape[d];
  return n;
}

DType reduce_result_dtype(ReduceKind kind, DType t) {
  switch (kind) {
    case ReduceKind::sum:
    case ReduceKind::prod: return is_integral(t, /*include_bool=*/true) ? kInt64 : t;
    case ReduceKind::mean:
      KILN_CHECK(is_floating(t), "mean: could not infer output dtype; the input dtype must be floating point, got {}",
                 t);
      return t;
    default: return t;
  }
}

Tensor reduce_forward(ReduceKind kind, const Tensor& x, const IntList& dims, bool keepdim) {
  const std::string name(kind_name(kind));
  const char* op = kind == ReduceKind::max ? "amax" : kind == ReduceKind::min ? "amin" : name.c_str();
  const IntList rd = normalize_dims(dims, x.dim(), op);
  const DType dt = reduce_result_dtype(kind, x.dtype());
  if (kind == ReduceKind::max || kind == ReduceKind::min) {
    for (int64_t d : rd)
      KILN_CHECK(x.sizes()[d] != 0, "{}: cannot reduce over dim {} of size 0 (input shape {}); the operation has "
                 "no identity", op, d, x.sizes());
  }
  Tensor out = make_tensor(reduced_shape(x.sizes(), rd, true), dt, x.device());
  if (out.numel() > 0) kernels::reduce[x.device()](kind, out, x, rd);
  if (keepdim) return out;
  Shape s = reduced_shape(x.sizes(), rd, false);
  return make_view(out, s, contiguous_strides(s), 0);
}

Tensor softmax_forward(const Tensor& x, int64_t dim, bool log) {
  const char* op = log ? "log_softmax" : "softmax";
  const int64_t d = wrap_dim(dim, x.dim(), op);
  KILN_CHECK(is_floating(x.dtype()), "{}: dtype {} is not supported (floating types only)", op, x.dtype());
  Tensor out = make_tensor(x.sizes(), x.dtype(), x.device());
  if (out.numel() > 0) kernels::softmax[x.device()](out, x, d, log);
  return out;
}

/// argmax/argmin along `dim` with the dim kept (size 1); never recorded by autograd.
Tensor arg_reduce_keepdim(ReduceKind kind, const Tensor& x, int64_t dim, const char* op) {
  const int64_t d = wrap_dim(dim, x.dim(), op);
  KILN_CHECK(x.dim() == 0 || x.sizes()[d] > 0, "{}: cannot reduce over dim {} of size 0 (input shape {})", op, d,
             x.sizes());
  Shape s = x.sizes();
  if (x.dim() > 0) s[d] = 1;
  Tensor out = make_tensor(s, kInt64, x.device());
  if (out.numel() > 0) kernels::arg_reduce[x.device()](kind, out, x, d);
  return out;
}

Tensor arg_reduce(ReduceKind kind, const Tensor& x, std::optional<int64_t> dim, bool keepdim, const char* op) {
  if (dim) {
    Tensor r = arg_reduce_keepdim(kind, x, *dim, op);
    if (keepdim || x.dim() == 0) return r;
    Shape s = reduced_shape(x.sizes(), {wrap_dim(*dim, x.dim(), op)}, false);
    return make_view(r, s, contiguous_strides(s), 0);
  }
  // Over all elements, in row-major order.
  KILN_CHECK(x.numel() > 0, "{}: cannot take the {} of an empty tensor (shape {})", op, op, x.sizes());
  Tensor c = x.is_contiguous() ? x.detach() : x.detach().contiguous();
  Tensor r = arg_reduce_keepdim(kind, make_view(c, {c.numel()}, {1}, c.offset()), 0, op);
  Shape s = keepdim ? Shape(static_cast<size_t>(x.dim()), 1) : Shape{};
  return make_view(r, s, contiguous_strides(s), 0);
}

std::tuple<Tensor, Tensor> max_min_dim(ReduceKind kind, const Tensor& x, int64_t dim, bool keepdim, const char* op) {
  const int64_t d = wrap_dim(dim, x.dim(), op);
  if (x.dim() == 0) return {x.clone(), zeros({}, TensorOptions(kInt64).device(x.device()))};
  Tensor idx = arg_reduce_keepdim(kind, x, d, op);
  // Values through gather, so autograd routes the gradient to the chosen element.
  Tensor values = gather(x, d, idx);
  if (keepdim) return {values, idx};
  Shape s = reduced_shape(x.sizes(), {d}, false);
  return {values.squeeze(d), make_view(idx, s, contiguous_strides(s), 0)};
}

}  // namespace
}  // namespace kiln

KILN_DEFINE_OP(reduce, &kiln::reduce_forward)
KILN_DEFINE_OP(softmax, &kiln::softmax_forward)

namespace kiln {

Tensor sum(const Tensor& x0, const IntList& dims, bool keepdim) {
  const Tensor x = fp32(AutocastOp::sum, x0);
  return op::reduce(ReduceKind::sum, x, normalize_dims(dims, x.dim(), "sum"), keepdim);
}

Tensor mean(const Tensor& x0, const IntList& dims, bool keepdim) {
  const Tensor x = fp32(AutocastOp::mean, x0);
  reduce_result_dtype(ReduceKind::mean, x.dtype());
  return op::reduce(ReduceKind::mean, x, normalize_dims(dims, x.dim(), "mean"), keepdim);
}

Tensor prod(const Tensor& x0, const IntList& dims, bool keepdim) {
  const Tensor x = fp32(AutocastOp::prod, x0);
  return op::reduce(ReduceKind::prod, x, normalize_dims(dims, x.dim(), "prod"), keepdim);
}

Tensor amax(const Tensor& x, const IntList& dims, bool keepdim) {
  return op::reduce(ReduceKind::max, x, normalize_dims(dims, x.dim(), "amax"), keepdim);
}

Tensor amin(const Tensor& x, const IntList& dims, bool keepdim) {
  return op::reduce(ReduceKind::min, x, normalize_dims(dims, x.dim(), "amin"), keepdim);
}

std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return max_min_dim(ReduceKind::max, x, dim, keepdim, "max");
}

std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return max_min_dim(ReduceKind::min, x, dim, keepdim, "min");
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_reduce(ReduceKind::max, x, dim, keepdim, "argmax");
}

Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_reduce(ReduceKind::min, x, dim, keepdim, "argmin");
}

Tensor var(const Tensor& x0, const IntList& dims, int64_t correction, bool keepdim) {
  const Tensor x = fp32(AutocastOp::var, x0);
  KILN_CHECK(is_floating(x.dtype()), "var: only floating types are supported, got {}", x.dtype());
  KILN_CHECK(correction >= 0, "var: correction must be non-negative, got {}", correction);
  const IntList rd = normalize_dims(dims, x.dim(), "var");
  const int64_t n = reduced_count(x.sizes(), rd);
  Tensor centred = x - mean(x, rd, /*keepdim=*/true);
  // n <= correction divides by zero: inf or NaN, as PyTorch.
  return sum(square(centred), rd, keepdim) / static_cast<double>(std::max<int64_t>(n - correction, 0));
}

Tensor std(const Tensor& x0, const IntList& dims, int64_t correction, bool keepdim) {
  const Tensor x = fp32(AutocastOp::std, x0);
  KILN_CHECK(is_floating(x.dtype()), "std: only floating types are supported, got {}", x.dtype());
  return sqrt(var(x, dims, correction, keepdim));
}

Tensor logsumexp(const Tensor& x1, const IntList& dims, bool keepdim) {
  const Tensor x0 = fp32(AutocastOp::logsumexp, x1);
  const Tensor x = is_floating(x0.dtype()) ? x0 : x0.to(kDefaultFloat);
  const IntList rd = normalize_dims(dims, x.dim(), "logsumexp");
  if (reduced_count(x.sizes(), rd) == 0) return log(sum(exp(x), rd, keepdim));  // log(0) = -inf
  // Shift by the (constant) maximum so exp cannot overflow; an infinite maximum would turn
  // x - m into NaN, so it is replaced by 0 (the result is then +-inf, as it should be).
  Tensor m = amax(x, rd, /*keepdim=*/true).detach();
  m = masked_fill(m, abs(m) == std::numeric_limits<double>::infinity(), 0);
  Tensor out = log(sum(exp(x - m), rd, keepdim));
  return out + (keepdim ? m : m.reshape(out.sizes()));
}

Tensor softmax(const Tensor& x, int64_t dim) { return op::softmax(fp32(AutocastOp::softmax, x), dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return op::softmax(fp32(AutocastOp::log_softmax, x), dim, true);
}

// ---- Tensor methods

Tensor Tensor::sum() const { return kiln::sum(*this); }
Tensor Tensor::sum(const IntList& dims, bool keepdim) const { return kiln::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return kiln::mean(*this); }
Tensor Tensor::mean(const IntList& dims, bool keepdim) const { return kiln::mean(*this, dims, keepdim); }
Tensor Tensor::max() const { return kiln::amax(*this); }
Tensor Tensor::min() const { return kiln::amin(*this); }
Tensor Tensor::amax(const IntList& dims, bool keepdim) const { return kiln::amax(*this, dims, keepdim); }
Tensor Tensor::amin(const IntList& dims, bool keepdim) const { return kiln::amin(*this, dims, keepdim); }
Tensor Tensor::argmax() const { return kiln::argmax(*this); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return kiln::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin() const { return kiln::argmin(*this); }
Tensor Tensor::argmin(int64_t dim, bool keepdim) const { return kiln::argmin(*this, dim, keepdim); }
Tensor Tensor::var(const IntList& dims, int64_t correction, bool keepdim) const {
  return kiln::var(*this, dims, correction, keepdim);
}
Tensor Tensor::std(const IntList& dims, int64_t correction, bool keepdim) const {
  return kiln::std(*this, dims, correction, keepdim);
}
Tensor Tensor::logsumexp(const IntList& dims, bool keepdim) const { return kiln::logsumexp(*this, dims, keepdim); }
Tensor Tensor::softmax(int64_t dim) const { return kiln::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return kiln::log_softmax(*this, dim); }

}  // namespace kiln
