// Creation ops: empty/zeros/ones/full, arange/linspace, random fills, *_like, from_blob.
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/kernels.h"
#include "core/ops.h"

namespace kiln {
namespace {

Tensor finish(Tensor t, const TensorOptions& opts) {
  if (opts.requires_grad_) t.set_requires_grad(true);
  return t;
}

Generator& pick(Generator* gen) { return gen ? *gen : default_generator(); }

}  // namespace

Tensor empty(const Shape& shape, TensorOptions opts) {
  return finish(make_tensor(shape, opts.dtype_, opts.device_), opts);
}

Tensor full(const Shape& shape, const Scalar& value, TensorOptions opts) {
  Tensor t = make_tensor(shape, opts.dtype_, opts.device_);
  kernels::fill[t.device()](t, value);
  return finish(t, opts);
}

Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1, opts); }

Tensor arange(const Scalar& end, std::optional<TensorOptions> opts) { return arange(0, end, 1, opts); }

Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, std::optional<TensorOptions> opts) {
  double a = start.to_double(), b = end.to_double(), s = step.to_double();
  KILN_CHECK(s != 0, "arange: step must be non-zero");
  KILN_CHECK(std::isfinite(a) && std::isfinite(b), "arange: start {} and end {} must be finite", a, b);
  KILN_CHECK((b - a) * s >= 0, "arange: step {} goes away from end (start {}, end {})", s, a, b);
  bool any_float = start.is_floating() || end.is_floating() || step.is_floating();
  TensorOptions o = opts.value_or(TensorOptions(any_float ? kDefaultFloat : kInt64));
  KILN_CHECK(o.dtype_ != kBool, "arange: dtype bool is not supported (numeric types only)");
  int64_t n = static_cast<int64_t>(std::ceil((b - a) / s));
  Tensor t = make_tensor({n}, o.dtype_, o.device_);
  kernels::arange[t.device()](t, a, s);
  return finish(t, o);
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions opts) {
  KILN_CHECK(steps >= 0, "linspace: steps must be non-negative, got {}", steps);
  KILN_CHECK(opts.dtype_ != kBool, "linspace: dtype bool is not supported (numeric types only)");
  Tensor t = make_tensor({steps}, opts.dtype_, opts.device_);
  double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  kernels::arange[t.device()](t, start, step);
  return finish(t, opts);
}

Tensor rand(const Shape& shape, TensorOptions opts, Generator* gen) {
  KILN_CHECK(is_floating(opts.dtype_), "rand: dtype {} is not floating", opts.dtype_);
  Tensor t = make_tensor(shape, opts.dtype_, opts.device_);
  kernels::uniform[t.device()](t, pick(gen), 0.0, 1.0);
  return finish(t, opts);
}

Tensor randn(const Shape& shape, TensorOptions opts, Generator* gen) {
  KILN_CHECK(is_floating(opts.dtype_), "randn: dtype {} is not floating", opts.dtype_);
  Tensor t = make_tensor(shape, opts.dtype_, opts.device_);
  kernels::normal[t.device()](t, pick(gen), 0.0, 1.0);
  return finish(t, opts);
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts, Generator* gen) {
  KILN_CHECK(low < high, "randint: empty range [{}, {})", low, high);
  KILN_CHECK(opts.dtype_ != kBool, "randint: dtype bool is not supported (numeric types only)");
  KILN_DISPATCH_ALL(opts.dtype_, "randint", [&]<class T>() {
    if constexpr (std::is_integral_v<T>)
      KILN_CHECK(low >= static_cast<int64_t>(std::numeric_limits<T>::lowest()) &&
                     high - 1 <= static_cast<int64_t>(std::numeric_limits<T>::max()),
                 "randint: range [{}, {}) does not fit dtype {}", low, high, opts.dtype_);
  });
  Tensor t = make_tensor(shape, opts.dtype_, opts.device_);
  kernels::randint[t.device()](t, pick(gen), low, high);
  return t;
}

Tensor tensor(std::initializer_list<double> values, TensorOptions opts) {
  return tensor(std::vector<double>(values), {}, opts);
}

Tensor scalar_tensor(const Scalar& value, TensorOptions opts) { return full({}, value, opts); }

static TensorOptions like(const Tensor& t) { return TensorOptions(t.dtype()).device(t.device()); }
Tensor empty_like(const Tensor& t) { return empty(t.sizes(), like(t)); }
Tensor zeros_like(const Tensor& t) { return zeros(t.sizes(), like(t)); }
Tensor ones_like(const Tensor& t) { return ones(t.sizes(), like(t)); }
Tensor full_like(const Tensor& t, const Scalar& v) { return full(t.sizes(), v, like(t)); }
Tensor rand_like(const Tensor& t) { return rand(t.sizes(), like(t)); }
Tensor randn_like(const Tensor& t) { return randn(t.sizes(), like(t)); }

Tensor from_blob(void* data, const Shape& shape, DType dtype, std::function<void(void*)> deleter, Device device) {
  auto storage = std::make_shared<StorageImpl>(data, shape_numel(shape) * element_size(dtype), device,
                                               std::move(deleter));
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), shape, contiguous_strides(shape), 0, dtype));
}

}  // namespace kiln
