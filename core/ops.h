// Kiln's public tensor API: PyTorch's names and argument order. Differentiable ops record the
// autograd tape when an input requires grad (link //autograd). Errors name the op and the
// offending shapes or values.
#pragma once

#include <optional>
#include <string>
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
/// x clamped to [min_val, max_val]; as clamp with scalar bounds, its gradient is 0 at both bounds (F.hardtanh).
Tensor hardtanh(const Tensor& x, double min_val = -1, double max_val = 1);
/// x * relu6(x + 3) / 6 (F.hardswish).
Tensor hardswish(const Tensor& x);
Tensor pow(const Tensor& x, const Scalar& exponent);
Tensor pow(const Tensor& x, const Tensor& exponent);
Tensor pow(const Scalar& base, const Tensor& exponent);
/// Gradient g strictly between the bounds, 0 at them and outside (PyTorch 2.15's, measured).
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
/// beta * input + alpha * (mat1 @ mat2); input broadcasts to the product (beta == 0 ignores it).
Tensor addmm(const Tensor& input, const Tensor& mat1, const Tensor& mat2, const Scalar& beta = 1,
             const Scalar& alpha = 1);
/// beta * input + alpha * bmm(batch1, batch2).
Tensor baddbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, const Scalar& beta = 1,
               const Scalar& alpha = 1);
/// torch.einsum over letters a-z/A-Z ("bhqd,bhkd->bhqk", "ij->ji", "bi,oij,bj->bo", implicit
/// output when "->" is absent); no "..." and no repeated letter within one operand.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands);

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

// ---- sorting and scans (core/ops/sort.cc)
/// Values and i64 indices sorted along `dim` (stable; NaN sorts as the largest value).
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
/// The k largest (or smallest) values along `dim` and their indices, in sorted order.
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
/// Running sum / product along `dim`.
Tensor cumsum(const Tensor& x, int64_t dim);
Tensor cumprod(const Tensor& x, int64_t dim);

// ---- rearranging (core/ops/rearrange.cc)
/// Reverses the order of elements along each of `dims` (a copy, as torch.flip).
Tensor flip(const Tensor& x, const IntList& dims);
/// Shifts elements along `dims` by `shifts`, wrapping around; no dims: over the flattened tensor.
Tensor roll(const Tensor& x, const IntList& shifts, const IntList& dims = {});
/// torch.Tensor.repeat: tiles x `repeats[i]` times along dim i (leading new dims allowed).
Tensor repeat(const Tensor& x, const IntList& repeats);
/// torch.tile: repeat, with `reps` padded with leading 1s to x's number of dims.
Tensor tile(const Tensor& x, const IntList& reps);
/// Lower / upper triangle of the last two dims (elements with j - i <= / >= diagonal), zeros elsewhere.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);
/// clamp with tensor bounds (broadcast; either may be undefined). Gradients as maximum(x, min) then
/// minimum(., max): a tie splits the gradient evenly between x and the bound (PyTorch 2.15's).
Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max);

/// Padding of the last dims, torch.nn.functional.pad's: `pads` = (last dim's before, after,
/// the dim before it's before, after, ...); constant pads may be negative (crop).
enum class PadMode { constant, reflect, replicate, circular };
Tensor pad(const Tensor& x, const IntList& pads, PadMode mode = PadMode::constant, double value = 0.0);

// ---- norms (core/ops/vector_norm.cc)
namespace linalg {
/// torch.linalg.vector_norm: ord > 0, 0 (count of non-zeros) or +-inf; all dims when `dims` is empty.
Tensor vector_norm(const Tensor& x, double ord = 2, const IntList& dims = {}, bool keepdim = false);
}  // namespace linalg
/// torch.norm for vectors: linalg::vector_norm.
Tensor norm(const Tensor& x, double p = 2, const IntList& dims = {}, bool keepdim = false);

// ---- indexing
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
/// Out of place: x with src added at `index` along `dim`.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
/// Out of place: x with src added at rows `index` along `dim` (the backward of index_select);
/// differentiable with respect to x and src.
Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
/// Rows of `weight` [num, dim] at `indices` (any shape, integer) -> [*indices, dim]; the row
/// `padding_idx` (>= 0; -1 for none) is returned as stored but receives no gradient.
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1);
/// i64 class indices -> i64 one-hot with a trailing dim of num_classes (-1: max + 1).
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

// ---- in place (bump the version counter; under autograd see core/ops/inplace.h)
Tensor& fill_(Tensor& x, const Scalar& value);
Tensor& copy_(Tensor& dst, const Tensor& src);
/// Sets the elements where `mask` (bool, broadcast to x's shape) is true to `value`.
Tensor& masked_fill_(Tensor& x, const Tensor& mask, const Scalar& value);
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
