// Elementwise ops: the differentiable primitives op::unary, op::binary and op::where (device
// checks, broadcasting, PyTorch type promotion, kernel dispatch), the ops composed from them
// (activations, pow, clamp, masked_fill, operators), comparisons, and in-place arithmetic.
// Kernels only ever see operands of one dtype already broadcast to out's shape. Every entry point
// reaches the primitives through unary()/binary_op() below, which apply autocast as the kind's
// row says (the `amp` column of core/elementwise_ops.h: exp, log, pow, softplus, ... in f32).
#include <cmath>
#include <limits>
#include <optional>
#include <string_view>

#include "core/autocast.h"
#include "core/grad_mode.h"
#include "core/kernels.h"
#include "core/op_table.h"
#include "core/ops.h"
#include "core/ops/inplace.h"

namespace kiln {
namespace {

// ---- type promotion: PyTorch's ResultTypeState / combine_categories

/// Dimensioned tensors outrank 0-dim tensors, which outrank wrapped numbers (Scalars); a lower
/// rank only matters when it is of a higher category (bool < integer < floating).
struct ResultTypeState {
  std::optional<DType> dim, zero, wrapped;

  static void promote(std::optional<DType>& slot, DType t) { slot = slot ? promote_types(*slot, t) : t; }
  void add(const Tensor& t) { promote(t.dim() > 0 ? dim : zero, t.dtype()); }
  /// A bare number: bool, i64, or the default float (a double literal does not make f64).
  void add(const Scalar& s) { promote(wrapped, s.default_dtype()); }

  static std::optional<DType> combine_categories(std::optional<DType> higher, std::optional<DType> lower) {
    if (!higher) return lower;
    if (!lower) return higher;
    if (is_floating(*higher)) return higher;
    if (*higher == kBool || is_floating(*lower)) return promote_types(*higher, *lower);
    return higher;
  }
  DType result() const { return combine_categories(dim, combine_categories(zero, wrapped)).value_or(kDefaultFloat); }
};

DType result_type_of(const Tensor& a, const Scalar& s) {
  ResultTypeState st;
  st.add(a);
  st.add(s);
  return st.result();
}

DType result_type_of(const Scalar& s, const Tensor& b) { return result_type_of(b, s); }

/// PyTorch's canCast: no floating -> integral and no non-bool -> bool.
bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  if (from != kBool && to == kBool) return false;
  return true;
}

bool is_one(const Scalar& s) { return s.is_floating() ? s.to_double() == 1.0 : s.to_int() == 1; }

// ---- helpers for forwards (never recorded by autograd)

void check_same_device(std::string_view op, const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.device() == b.device(), "{}: expected all tensors on the same device, got {} and {}", op,
             a.device(), b.device());
}

/// x converted to dtype (a new tensor only if the dtype differs).
Tensor cast(const Tensor& x, DType dtype) {
  if (x.dtype() == dtype) return x;
  Tensor out = make_tensor(x.sizes(), dtype, x.device());
  kernels::copy[x.device()](out, x);
  return out;
}

/// A view of t broadcast to `shape` with zero strides on the broadcast dims (shapes already
/// checked compatible).
Tensor expand_to(const Tensor& t, const Shape& shape) {
  if (t.sizes() == shape) return t;
  const size_t n = shape.size(), k = static_cast<size_t>(t.dim());
  Shape strides(n, 0);
  for (size_t i = 0; i < k; ++i) {
    size_t j = n - k + i;
    if (t.sizes()[i] == shape[j]) strides[j] = t.strides()[i];
  }
  return make_view(t, shape, std::move(strides), t.offset());
}

Tensor prepare(const Tensor& x, DType dtype, const Shape& shape) { return expand_to(cast(x, dtype), shape); }

/// A 0-dim tensor holding `s`, used as a (broadcast) operand.
Tensor wrap(const Scalar& s, DType dtype, Device device) {
  return scalar_tensor(s, TensorOptions(dtype).device(device));
}

// ---- forwards of the primitives

Tensor unary_forward(const UnaryOp& op, const Tensor& x) {
  DType dt = x.dtype();
  if (!is_floating(dt)) {
    if (kind_dtypes(op.kind) == KindDTypes::floating) dt = kDefaultFloat;  // torch.exp(int tensor) is f32
    else KILN_CHECK(dt != kBool, "{}: not supported for bool tensors (shape {})", kind_name(op.kind), x.sizes());
  }
  Tensor out = make_tensor(x.sizes(), dt, x.device());
  kernels::unary[x.device()](op, out, cast(x, dt));
  return out;
}

/// The dtype a binary kind computes in, from its row's dtypes column.
DType binary_compute_dtype(BinaryKind kind, const Tensor& a, const Tensor& b) {
  const DType dt = result_type(a, b);
  switch (kind_dtypes(kind)) {
    case KindDTypes::any: return dt;
    case KindDTypes::floating: return is_floating(dt) ? dt : kDefaultFloat;  // true division
    case KindDTypes::numeric: break;
  }
  KILN_CHECK(dt != kBool, "{}: not supported for bool tensors (shapes {} and {}); convert them first",
             kind_name(kind), a.sizes(), b.sizes());
  return dt;
}

Tensor binary_forward(BinaryKind kind, const Tensor& a, const Tensor& b) {
  std::string_view name = kind_name(kind);
  check_same_device(name, a, b);
  Shape shape = broadcast_shapes(a.sizes(), b.sizes(), name.data());
  DType dt = binary_compute_dtype(kind, a, b);
  Tensor out = make_tensor(shape, dt, a.device());
  kernels::binary[a.device()](kind, out, prepare(a, dt, shape), prepare(b, dt, shape));
  return out;
}

Tensor where_forward(const Tensor& cond, const Tensor& a, const Tensor& b) {
  KILN_CHECK(cond.dtype() == kBool, "where: condition must be a bool tensor, got {}", cond.dtype());
  check_same_device("where", cond, a);
  check_same_device("where", a, b);
  Shape shape = broadcast_shapes(broadcast_shapes(cond.sizes(), a.sizes(), "where"), b.sizes(), "where");
  DType dt = result_type(a, b);
  Tensor out = make_tensor(shape, dt, a.device());
  kernels::where[a.device()](out, expand_to(cond, shape), prepare(a, dt, shape), prepare(b, dt, shape));
  return out;
}

}  // namespace
}  // namespace kiln

KILN_DEFINE_OP(unary, &kiln::unary_forward)
KILN_DEFINE_OP(binary, &kiln::binary_forward)
KILN_DEFINE_OP(where, &kiln::where_forward)

namespace kiln {
namespace {

/// A unary kind through its primitive, x cast first as the row's `amp` column says (a `keep`
/// kind passes x straight through: no tensor copy on the common path).
Tensor unary(UnaryKind kind, const Tensor& x, double a = 0, double b = 0) {
  if (kind_autocast(kind) == KindAutocast::keep) return op::unary(UnaryOp{kind, a, b}, x);
  return op::unary(UnaryOp{kind, a, b}, autocast::cast_input(kind, x));
}

/// A binary kind through its primitive, both operands cast first as the row's `amp` column says.
Tensor binary_op(BinaryKind kind, const Tensor& a, const Tensor& b) {
  if (kind_autocast(kind) == KindAutocast::keep) return op::binary(kind, a, b);
  return op::binary(kind, autocast::cast_input(kind, a), autocast::cast_input(kind, b));
}

/// x in dtype `dt` for a composite op (differentiable, a no-op when the dtype already matches).
Tensor as_dtype(const Tensor& x, DType dt) { return x.dtype() == dt ? x : x.to(dt); }

/// a + alpha * b or a - alpha * b; alpha scales b in the result dtype.
Tensor add_sub(BinaryKind kind, const Tensor& a, const Tensor& b, const Scalar& alpha) {
  if (is_one(alpha)) return binary_op(kind, a, b);
  const char* name = kind == BinaryKind::add ? "add" : "sub";
  DType dt = result_type(a, b);
  KILN_CHECK(is_floating(dt) || !alpha.is_floating(),
             "{}: alpha {} must be an integer for integral inputs (dtypes {} and {})", name, alpha.to_double(),
             a.dtype(), b.dtype());
  KILN_CHECK(dt != kBool || alpha.kind() == Scalar::Kind::Bool,
             "{}: alpha must be a bool for bool inputs", name);
  Tensor scaled = binary_op(BinaryKind::mul, as_dtype(b, dt), wrap(alpha, dt, b.device()));
  return binary_op(kind, a, scaled);
}

Tensor compare(CompareKind kind, const Tensor& a, const Tensor& b, DType dt) {
  std::string_view name = kind_name(kind);
  check_same_device(name, a, b);
  Shape shape = broadcast_shapes(a.sizes(), b.sizes(), name.data());
  Tensor out = make_tensor(shape, kBool, a.device());
  kernels::compare[a.device()](kind, out, prepare(a, dt, shape), prepare(b, dt, shape));
  return out;
}

Tensor compare(CompareKind kind, const Tensor& a, const Tensor& b) { return compare(kind, a, b, result_type(a, b)); }

Tensor compare(CompareKind kind, const Tensor& a, const Scalar& b) {
  DType dt = result_type_of(a, b);
  return compare(kind, a, wrap(b, dt, a.device()), dt);
}

/// `self op= alpha * other` written straight into self's storage (or, under autograd, computed
/// out of place from a clone and rebased). `result_dtype` is what the out-of-place op would give.
Tensor& inplace_binary(Tensor& self, BinaryKind kind, const Tensor& other, const Scalar& alpha,
                       DType result_dtype, const char* name) {
  check_inplace(self, name);
  check_same_device(name, self, other);
  KILN_CHECK(can_cast(result_dtype, self.dtype()),
             "{}: result type {} can't be cast to the tensor's dtype {} (other has dtype {})", name, result_dtype,
             self.dtype(), other.dtype());
  Shape shape = broadcast_shapes(self.sizes(), other.sizes(), name);
  KILN_CHECK(shape == self.sizes(), "{}: other of shape {} cannot be broadcast to the tensor's shape {}", name,
             other.sizes(), self.sizes());
  if (inplace_needs_grad(self, other)) {
    Tensor orig = self.clone();
    Tensor r = kind == BinaryKind::add   ? add(orig, other, alpha)
               : kind == BinaryKind::sub ? sub(orig, other, alpha)
               : kind == BinaryKind::mul ? mul(orig, other)
                                         : div(orig, other);
    commit_inplace(self, r, name);
    return self;
  }
  const Device dev = self.device();
  const DType dt = self.dtype();
  KILN_CHECK(is_floating(dt) || !alpha.is_floating(), "{}: alpha {} must be an integer for an integral tensor",
             name, alpha.to_double());
  Tensor o = cast(other, dt);
  if (!is_one(alpha)) {
    Tensor scaled = make_tensor(o.sizes(), dt, dev);
    kernels::binary[dev](BinaryKind::mul, scaled, o, expand_to(wrap(alpha, dt, dev), o.sizes()));
    o = scaled;
  } else if (o.storage() == self.storage() && !(o.offset() == self.offset() && o.strides() == self.strides())) {
    // Partial overlap with self: read from a copy so no element is read after it was written.
    o = o.clone();
  }
  kernels::binary[dev](kind, self, self, expand_to(o, self.sizes()));
  self.storage()->bump_version();
  return self;
}

Tensor& inplace_binary(Tensor& self, BinaryKind kind, const Scalar& other, const char* name) {
  DType rt = result_type_of(self, other);
  if (kind == BinaryKind::div && !is_floating(rt)) rt = kDefaultFloat;
  // Checked here too: `other` is wrapped in self's dtype below, which would hide the promotion.
  KILN_CHECK(can_cast(rt, self.dtype()), "{}: result type {} can't be cast to the tensor's dtype {}", name, rt,
             self.dtype());
  return inplace_binary(self, kind, wrap(other, self.dtype(), self.device()), 1, rt, name);
}

DType binary_result_dtype(BinaryKind kind, const Tensor& a, const Tensor& b) {
  DType dt = result_type(a, b);
  return kind == BinaryKind::div && !is_floating(dt) ? kDefaultFloat : dt;
}

}  // namespace

DType result_type(const Tensor& a, const Tensor& b) {
  ResultTypeState st;
  st.add(a);
  st.add(b);
  return st.result();
}

Tensor binary(BinaryKind kind, const Tensor& a, const Tensor& b) { return binary_op(kind, a, b); }

Tensor unary_backward(const UnaryOp& op, const Tensor& grad_y, const Tensor& saved) {
  const std::string_view name = kind_name(op.kind);
  check_same_device(name, grad_y, saved);
  KILN_CHECK(grad_y.sizes() == saved.sizes() && grad_y.dtype() == saved.dtype() && is_floating(grad_y.dtype()),
             "{} backward: expects floating tensors of one shape and dtype, got {} {} and {} {}", name,
             grad_y.dtype(), grad_y.sizes(), saved.dtype(), saved.sizes());
  // Not recorded: a backward formula is never itself differentiated (there is no create_graph).
  KILN_CHECK(!GradMode::is_enabled() || !(grad_y.requires_grad() || saved.requires_grad()),
             "{}: double backward is not supported", name);
  Tensor grad_x = make_tensor(grad_y.sizes(), grad_y.dtype(), grad_y.device());
  kernels::unary_backward[grad_y.device()](op, grad_x, grad_y, saved);
  return grad_x;
}

// ---- unary

Tensor neg(const Tensor& x) { return unary(UnaryKind::neg, x); }
Tensor abs(const Tensor& x) { return unary(UnaryKind::abs, x); }
Tensor exp(const Tensor& x) { return unary(UnaryKind::exp, x); }
Tensor log(const Tensor& x) { return unary(UnaryKind::log, x); }
Tensor log1p(const Tensor& x) { return unary(UnaryKind::log1p, x); }
Tensor expm1(const Tensor& x) { return unary(UnaryKind::expm1, x); }
Tensor sqrt(const Tensor& x) { return unary(UnaryKind::sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary(UnaryKind::rsqrt, x); }
Tensor sin(const Tensor& x) { return unary(UnaryKind::sin, x); }
Tensor cos(const Tensor& x) { return unary(UnaryKind::cos, x); }
Tensor tanh(const Tensor& x) { return unary(UnaryKind::tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary(UnaryKind::sigmoid, x); }
Tensor relu(const Tensor& x) { return unary(UnaryKind::relu, x); }
Tensor gelu(const Tensor& x, std::string_view approximate) {
  KILN_CHECK(approximate == "none" || approximate == "tanh",
             "gelu: approximate must be \"none\" or \"tanh\", got \"{}\"", approximate);
  return unary(approximate == "tanh" ? UnaryKind::gelu_tanh : UnaryKind::gelu, x);
}
Tensor silu(const Tensor& x) { return unary(UnaryKind::silu, x); }
Tensor square(const Tensor& x) { return unary(UnaryKind::square, x); }
Tensor reciprocal(const Tensor& x) {
  return unary(UnaryKind::reciprocal, x);
}
Tensor sign(const Tensor& x) { return unary(UnaryKind::sign, x); }
Tensor softplus(const Tensor& x, double beta, double threshold) {
  return unary(UnaryKind::softplus, x, beta, threshold);
}
Tensor leaky_relu(const Tensor& x, double negative_slope) { return unary(UnaryKind::leaky_relu, x, negative_slope); }
Tensor elu(const Tensor& x, double alpha) { return unary(UnaryKind::elu, x, alpha); }
Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  KILN_CHECK(min_val <= max_val, "hardtanh: min_val {} cannot be greater than max_val {}", min_val, max_val);
  return unary(UnaryKind::hardtanh, x, min_val, max_val);
}
Tensor hardswish(const Tensor& x) { return unary(UnaryKind::hardswish, x); }

Tensor pow(const Tensor& x, const Scalar& exponent) {
  DType dt = result_type_of(x, exponent);
  KILN_CHECK(is_floating(dt) || exponent.to_int() >= 0,
             "pow: integers to negative integer powers are not allowed (exponent {}, dtype {})", exponent.to_int(),
             dt);
  return unary(UnaryKind::pow_scalar, as_dtype(x, dt), exponent.to_double());
}

Tensor pow(const Tensor& x, const Tensor& exponent) {
  return binary_op(BinaryKind::pow, x, exponent);
}

Tensor pow(const Scalar& base, const Tensor& exponent0) {
  // Cast before the base is wrapped, so that a bf16 exponent does not round the base to bf16.
  const Tensor exponent = autocast::cast_input(BinaryKind::pow, exponent0);
  DType dt = result_type_of(base, exponent);
  return binary_op(BinaryKind::pow, wrap(base, dt, exponent.device()), exponent);
}

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  KILN_CHECK(min || max, "clamp: at least one of min and max must be given");
  ResultTypeState st;
  st.add(x);
  if (min) st.add(*min);
  if (max) st.add(*max);
  DType dt = st.result();
  KILN_CHECK(dt != kBool, "clamp: not supported for bool tensors");
  constexpr double inf = std::numeric_limits<double>::infinity();
  return unary(UnaryKind::clamp, as_dtype(x, dt), min ? min->to_double() : -inf, max ? max->to_double() : inf);
}

// ---- binary

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) { return add_sub(BinaryKind::add, a, b, alpha); }
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) { return add_sub(BinaryKind::sub, a, b, alpha); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary_op(BinaryKind::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(BinaryKind::div, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op(BinaryKind::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op(BinaryKind::minimum, a, b); }

Tensor eq(const Tensor& a, const Tensor& b) { return compare(CompareKind::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(CompareKind::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(CompareKind::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(CompareKind::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(CompareKind::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(CompareKind::ge, a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) { return op::where(cond, a, b); }

Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b) {
  return op::where(cond, a, wrap(b, result_type_of(a, b), a.device()));
}

Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b) {
  return op::where(cond, wrap(a, result_type_of(a, b), b.device()), b);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  KILN_CHECK(mask.dtype() == kBool, "masked_fill: mask must be a bool tensor, got {}", mask.dtype());
  // The value takes x's dtype (as torch.masked_fill): a 0-dim operand of x's dtype never promotes.
  return op::where(mask, wrap(value, x.dtype(), x.device()), x);
}

Tensor& masked_fill_(Tensor& x, const Tensor& mask, const Scalar& value) {
  check_inplace(x, "masked_fill_");
  KILN_CHECK(mask.dtype() == kBool, "masked_fill_: mask must be a bool tensor, got {}", mask.dtype());
  check_same_device("masked_fill_", x, mask);
  KILN_CHECK(broadcast_shapes(x.sizes(), mask.sizes(), "masked_fill_") == x.sizes(),
             "masked_fill_: mask of shape {} cannot be broadcast to the tensor's shape {}", mask.sizes(), x.sizes());
  if (inplace_needs_grad(x, Tensor())) {
    commit_inplace(x, masked_fill(x.clone(), mask, value), "masked_fill_");
    return x;
  }
  // Elementwise, each element read before it is written: x is both an operand and the output.
  kernels::where[x.device()](x, expand_to(mask, x.sizes()), expand_to(wrap(value, x.dtype(), x.device()), x.sizes()),
                             x);
  x.storage()->bump_version();
  return x;
}

Tensor& Tensor::masked_fill_(const Tensor& mask, const Scalar& value) { return kiln::masked_fill_(*this, mask, value); }

// ---- operators

Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }

Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, wrap(b, result_type_of(a, b), a.device())); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, wrap(b, result_type_of(a, b), a.device())); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, wrap(b, result_type_of(a, b), a.device())); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, wrap(b, result_type_of(a, b), a.device())); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(wrap(a, result_type_of(a, b), b.device()), b); }
Tensor operator-(const Scalar& a, const Tensor& b) { return sub(wrap(a, result_type_of(a, b), b.device()), b); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(wrap(a, result_type_of(a, b), b.device()), b); }
Tensor operator/(const Scalar& a, const Tensor& b) { return div(wrap(a, result_type_of(a, b), b.device()), b); }

Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, const Scalar& b) { return compare(CompareKind::eq, a, b); }
Tensor operator!=(const Tensor& a, const Scalar& b) { return compare(CompareKind::ne, a, b); }
Tensor operator<(const Tensor& a, const Scalar& b) { return compare(CompareKind::lt, a, b); }
Tensor operator<=(const Tensor& a, const Scalar& b) { return compare(CompareKind::le, a, b); }
Tensor operator>(const Tensor& a, const Scalar& b) { return compare(CompareKind::gt, a, b); }
Tensor operator>=(const Tensor& a, const Scalar& b) { return compare(CompareKind::ge, a, b); }

// ---- Tensor methods

Tensor Tensor::neg() const { return kiln::neg(*this); }
Tensor Tensor::abs() const { return kiln::abs(*this); }
Tensor Tensor::exp() const { return kiln::exp(*this); }
Tensor Tensor::log() const { return kiln::log(*this); }
Tensor Tensor::sqrt() const { return kiln::sqrt(*this); }
Tensor Tensor::rsqrt() const { return kiln::rsqrt(*this); }
Tensor Tensor::sin() const { return kiln::sin(*this); }
Tensor Tensor::cos() const { return kiln::cos(*this); }
Tensor Tensor::tanh() const { return kiln::tanh(*this); }
Tensor Tensor::sigmoid() const { return kiln::sigmoid(*this); }
Tensor Tensor::relu() const { return kiln::relu(*this); }
Tensor Tensor::gelu() const { return kiln::gelu(*this); }
Tensor Tensor::silu() const { return kiln::silu(*this); }
Tensor Tensor::square() const { return kiln::square(*this); }
Tensor Tensor::pow(const Scalar& exponent) const { return kiln::pow(*this, exponent); }
Tensor Tensor::pow(const Tensor& exponent) const { return kiln::pow(*this, exponent); }
Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const {
  return kiln::clamp(*this, min, max);
}
Tensor Tensor::masked_fill(const Tensor& mask, const Scalar& value) const {
  return kiln::masked_fill(*this, mask, value);
}

Tensor& Tensor::add_(const Tensor& other, const Scalar& alpha) {
  return inplace_binary(*this, BinaryKind::add, other, alpha, binary_result_dtype(BinaryKind::add, *this, other),
                        "add_");
}
Tensor& Tensor::add_(const Scalar& other) { return inplace_binary(*this, BinaryKind::add, other, "add_"); }
Tensor& Tensor::sub_(const Tensor& other, const Scalar& alpha) {
  KILN_CHECK(dtype() != kBool, "sub_: not supported for bool tensors");
  return inplace_binary(*this, BinaryKind::sub, other, alpha, binary_result_dtype(BinaryKind::sub, *this, other),
                        "sub_");
}
Tensor& Tensor::mul_(const Tensor& other) {
  return inplace_binary(*this, BinaryKind::mul, other, 1, binary_result_dtype(BinaryKind::mul, *this, other),
                        "mul_");
}
Tensor& Tensor::mul_(const Scalar& other) { return inplace_binary(*this, BinaryKind::mul, other, "mul_"); }
Tensor& Tensor::div_(const Tensor& other) {
  return inplace_binary(*this, BinaryKind::div, other, 1, binary_result_dtype(BinaryKind::div, *this, other),
                        "div_");
}
Tensor& Tensor::div_(const Scalar& other) { return inplace_binary(*this, BinaryKind::div, other, "div_"); }

}  // namespace kiln
