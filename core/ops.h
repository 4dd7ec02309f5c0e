// Kiln's public tensor API: PyTorch's names and argument order. Differentiable ops record the
// autograd tape when an input requires grad (link //autograd). Errors name the op and the
// offending shapes or values.
#pragma once

#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/generator.h"
#include "core/op_kinds.h"
#include "core/tensor.h"

namespace kiln {

// ---- creation
Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, const Scalar& value, TensorOptions opts = {});
/// Values start, start+step, ... < end. Integer arguments give i64 unless opts say otherwise.
Tensor arange(const Scalar& end, std::optional<TensorOptions> opts = std::nullopt);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1,
              std::optional<TensorOptions> opts = std::nullopt);
Tensor linspace(double start, double end, int64_t steps, TensorOptions opts = {});
/// Uniform on [0, 1).
Tensor rand(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
/// Standard normal.
Tensor randn(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
/// Integers in [low, high), i64 by default.
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts = kInt64,
               Generator* gen = nullptr);
/// A tensor holding a copy of `values` with the given shape (1-D of values.size() if empty).
template <class T> Tensor tensor(const std::vector<T>& values, const Shape& shape = {},
                                 std::optional<TensorOptions> opts = std::nullopt);
Tensor tensor(std::initializer_list<double> values, TensorOptions opts = {});
/// A 0-dim tensor holding `value` (a "wrapped number" in type promotion).
Tensor scalar_tensor(const Scalar& value, TensorOptions opts);
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, const Scalar& value);
Tensor rand_like(const Tensor& t);
Tensor randn_like(const Tensor& t);
/// Creates a tensor over `data` without copying; `deleter` runs when the last view is gone.
Tensor from_blob(void* data, const Shape& shape, DType dtype, std::function<void(void*)> deleter = {},
                 Device device = kCPU);

// ---- elementwise unary
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor log1p(const Tensor& x);
Tensor expm1(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
/// GELU: exact (erf-based, approximate = "none", PyTorch's default) or its tanh approximation
/// (approximate = "tanh", GPT-2's).
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor silu(const Tensor& x);
Tensor square(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor sign(const Tensor& x);
/// log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (F.softplus).
Tensor softplus(const Tensor& x, double beta = 1, double threshold = 20);
/// x where x > 0, else negative_slope * x (F.leaky_relu).
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
/// x where x > 0, else alpha * (exp(x) - 1) (F.elu).
Tensor elu(const Tensor& x, double alpha = 1);
/// x clamped to [min_val, max_val]; unlike clamp, its gradient is 0 at both bounds (F.hardtanh).
Tensor hardtanh(const Tensor& x, double min_val = -1, double max_val = 1);
/// x * relu6(x + 3) / 6 (F.hardswish).
Tensor hardswish(const Tensor& x);
Tensor pow(const Tensor& x, const Scalar& exponent);
Tensor pow(const Tensor& x, const Tensor& exponent);
Tensor pow(const Scalar& base, const Tensor& exponent);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);

// ---- elementwise binary (broadcasting, PyTorch type promotion)
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b);
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);
/// The dtype PyTorch would give `a op b` (dimensioned tensors outrank 0-dim ones).
DType result_type(const Tensor& a, const Tensor& b);
/// Low-level: a binary op of any kind.
Tensor binary(BinaryKind kind, const Tensor& a, const Tensor& b);
/// Low-level: grad_x of the unary `op` from grad_y and what its row saves (input or output; any
/// tensor of grad_y's shape for `none`), in one fused pass. Autograd's formula; not differentiable.
Tensor unary_backward(const UnaryOp& op, const Tensor& grad_y, const Tensor& saved);

Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Scalar& b);
Tensor operator!=(const Tensor& a, const Scalar& b);
Tensor operator<(const Tensor& a, const Scalar& b);
Tensor operator<=(const Tensor& a, const Scalar& b);
Tensor operator>(const Tensor& a, const Scalar& b);
Tensor operator>=(const Tensor& a, const Scalar& b);

// ---- reductions (dims may be negative; an empty dims list reduces over all dims)
Tensor sum(const Tensor& x, const IntList& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const IntList& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const IntList& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const IntList& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const IntList& dims = {}, bool keepdim = false);
/// Largest value and its index along `dim` (first index on ties).
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
/// Variance with Bessel's `correction` (1: unbiased, as torch.var's default).
Tensor var(const Tensor& x, const IntList& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const IntList& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const IntList& dims, bool keepdim = false);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- linear algebra
/// torch.matmul: 1-D and N-D operands, batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);

// ---- views and shape
Tensor view(const Tensor& x, const Shape& shape);  // one dim may be -1
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1);
Tensor permute(const Tensor& x, const IntList& dims);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& shape);  // -1 keeps a size
Tensor squeeze(const Tensor& x);
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor to(const Tensor& x, DType dtype);
Tensor to(const Tensor& x, Device device);
/// A contiguous CPU copy of `x` in page-locked memory when a GPU backend is linked and a device
/// is usable (its copies to the GPU then run asynchronously); otherwise x made contiguous.
Tensor pin_memory(const Tensor& x);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split_with_sizes(const Tensor& x, const IntList& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

// ---- indexing
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
/// Out of place: x with src added at `index` along `dim`.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
/// Out of place: x with src added at rows `index` along `dim` (the backward of index_select).
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
/// i64 class indices -> i64 one-hot with a trailing dim of num_classes (-1: max + 1).
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

// ---- in place (no autograd for leaves that require grad; bump the version counter)
Tensor& fill_(Tensor& x, const Scalar& value);
Tensor& copy_(Tensor& dst, const Tensor& src);
/// Makes `t` refer to `data`'s storage, shape and dtype while keeping its identity and its
/// autograd flags (how Module::to moves parameters without invalidating references to them).
void set_data(Tensor& t, const Tensor& data);

}  // namespace kiln

namespace kiln {

template <class T> Tensor tensor(const std::vector<T>& values, const Shape& shape,
                                 std::optional<TensorOptions> opts) {
  Shape s = shape.empty() ? Shape{static_cast<int64_t>(values.size())} : shape;
  KILN_CHECK(shape_numel(s) == static_cast<int64_t>(values.size()),
             "tensor: {} values do not fill shape {}", values.size(), s);
  constexpr DType dt = dtype_of<T>::value;
  Tensor host = make_tensor(s, dt, kCPU);
  T* p = host.data_ptr<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  TensorOptions o = opts.value_or(TensorOptions(dt));
  Tensor out = host.to(o.device_, o.dtype_);
  if (o.requires_grad_) out.set_requires_grad(true);
  return out;
}

}  // namespace kiln
