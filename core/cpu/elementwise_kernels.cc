// CPU elementwise kernels: unary, binary (with the fused activation-backward kinds), compare and
// where. 16-bit floats compute in float (opmath_t); integer dtypes get the ops that make sense for
// them. Contiguous f32/f64 transcendental ops run through Eigen's vectorised array functions, split
// across threads; everything else goes through map1/map2/map3, whose contiguous paths vectorise.
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/cpu/loops.h"
#include "core/int_pow.h"
#include "core/kernels.h"

namespace kiln::cpu {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;     // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
// Transcendental ops cost ~10x a plain add per element, so they are worth splitting sooner.
constexpr int64_t kTranscendentalGrain = kGrainSize / 8;

template <class T> constexpr bool is_eigen_float_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

// ---- scalar formulas (M is float or double), shared by the strided and 16-bit paths

template <class M> inline M sigmoid_of(M x) { return M(1) / (M(1) + std::exp(-x)); }
template <class M> inline M gelu_of(M x) { return M(0.5) * x * (M(1) + std::erf(x * M(kInvSqrt2))); }
/// d/dx [x * Phi(x)] = Phi(x) + x * phi(x).
template <class M> inline M gelu_grad_of(M x) {
  M cdf = M(0.5) * (M(1) + std::erf(x * M(kInvSqrt2)));
  M pdf = std::exp(M(-0.5) * x * x) * M(kInvSqrt2Pi);
  return cdf + x * pdf;
}
template <class M> inline M silu_grad_of(M x) {
  M s = sigmoid_of(x);
  return s * (M(1) + x * (M(1) - s));
}

// ---- unary

/// The kinds worth Eigen's vectorised transcendental functions (plain arithmetic is left to
/// map1, which the compiler vectorises by itself).
bool eigen_unary_kind(UnaryKind k) {
  switch (k) {
    case UnaryKind::exp:
    case UnaryKind::log:
    case UnaryKind::log1p:
    case UnaryKind::expm1:
    case UnaryKind::sin:
    case UnaryKind::cos:
    case UnaryKind::tanh:
    case UnaryKind::sqrt:
    case UnaryKind::rsqrt:
    case UnaryKind::sigmoid:
    case UnaryKind::silu:
    case UnaryKind::gelu: return true;
    default: return false;
  }
}

/// out[0, m) = kind(in[0, m)) for one contiguous span (in may equal out); an eigen_unary_kind.
template <class T>
void eigen_unary_span(UnaryKind kind, T* out, const T* in, int64_t m) {
  using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<const Arr> v(in, m);
  Eigen::Map<Arr> d(out, m);
  const T one(1);
  switch (kind) {
    case UnaryKind::exp: d = v.exp(); break;
    case UnaryKind::log: d = v.log(); break;
    case UnaryKind::log1p: d = v.log1p(); break;
    case UnaryKind::expm1: d = v.expm1(); break;
    case UnaryKind::sin: d = v.sin(); break;
    case UnaryKind::cos: d = v.cos(); break;
    case UnaryKind::tanh: d = v.tanh(); break;
    case UnaryKind::sqrt: d = v.sqrt(); break;
    case UnaryKind::rsqrt: d = v.rsqrt(); break;
    // 1 / (1 + e^-x) rather than Eigen's logistic(), whose float version loses relative accuracy
    // below x = -9.
    case UnaryKind::sigmoid: d = (one + (-v).exp()).inverse(); break;
    case UnaryKind::silu: d = v / (one + (-v).exp()); break;
    case UnaryKind::gelu: d = T(0.5) * v * (one + (v * T(kInvSqrt2)).erf()); break;
    default: fail("unary {}: no vectorised path", kind_name(kind));
  }
}

/// The vectorised path for contiguous operands: f32/f64 straight through Eigen, 16-bit floats
/// through a float buffer per block. False when `op` is not an eigen_unary_kind.
template <class T>
bool unary_eigen(const UnaryOp& op, Tensor& out, const Tensor& x) {
  if (!eigen_unary_kind(op.kind) || !out.is_contiguous() || !x.is_contiguous()) return false;
  T* o = static_cast<T*>(out.data_ptr());
  const T* in = static_cast<const T*>(x.data_ptr());
  parallel_for(0, out.numel(), kTranscendentalGrain, [&](int64_t b, int64_t e) {
    if constexpr (is_eigen_float_v<T>) {
      eigen_unary_span<T>(op.kind, o + b, in + b, e - b);
    } else {
      constexpr int64_t kBlock = 1024;
      alignas(64) float buf[kBlock];
      for (int64_t blk = b; blk < e; blk += kBlock) {
        const int64_t m = std::min(kBlock, e - blk);
        for (int64_t j = 0; j < m; ++j) buf[j] = static_cast<float>(in[blk + j]);
        eigen_unary_span<float>(op.kind, buf, buf, m);
        for (int64_t j = 0; j < m; ++j) o[blk + j] = static_cast<T>(buf[j]);
      }
    }
  });
  return true;
}

template <class T>
void unary_floating(const UnaryOp& op, Tensor& out, const Tensor& x) {
  using M = opmath_t<T>;
  if (unary_eigen<T>(op, out, x)) return;
  const M a = static_cast<M>(op.a), b = static_cast<M>(op.b);
  switch (op.kind) {
    case UnaryKind::neg: return map1<T, T>(out, x, [](M v) { return -v; });
    case UnaryKind::abs: return map1<T, T>(out, x, [](M v) { return std::abs(v); });
    case UnaryKind::exp: return map1<T, T>(out, x, [](M v) { return std::exp(v); });
    case UnaryKind::log: return map1<T, T>(out, x, [](M v) { return std::log(v); });
    case UnaryKind::log1p: return map1<T, T>(out, x, [](M v) { return std::log1p(v); });
    case UnaryKind::expm1: return map1<T, T>(out, x, [](M v) { return std::expm1(v); });
    case UnaryKind::sqrt: return map1<T, T>(out, x, [](M v) { return std::sqrt(v); });
    case UnaryKind::rsqrt: return map1<T, T>(out, x, [](M v) { return M(1) / std::sqrt(v); });
    case UnaryKind::sin: return map1<T, T>(out, x, [](M v) { return std::sin(v); });
    case UnaryKind::cos: return map1<T, T>(out, x, [](M v) { return std::cos(v); });
    case UnaryKind::tanh: return map1<T, T>(out, x, [](M v) { return std::tanh(v); });
    case UnaryKind::sigmoid: return map1<T, T>(out, x, [](M v) { return sigmoid_of(v); });
    // `v < 0 ? 0 : v` keeps NaN, as torch.relu does.
    case UnaryKind::relu: return map1<T, T>(out, x, [](M v) { return v < M(0) ? M(0) : v; });
    case UnaryKind::gelu: return map1<T, T>(out, x, [](M v) { return gelu_of(v); });
    case UnaryKind::silu: return map1<T, T>(out, x, [](M v) { return v * sigmoid_of(v); });
    case UnaryKind::square: return map1<T, T>(out, x, [](M v) { return v * v; });
    case UnaryKind::reciprocal: return map1<T, T>(out, x, [](M v) { return M(1) / v; });
    case UnaryKind::sign:
      return map1<T, T>(out, x, [](M v) { return static_cast<M>((M(0) < v) - (v < M(0))); });
    case UnaryKind::pow_scalar:
      // Common exponents skip std::pow (and vectorise).
      if (op.a == 2) return map1<T, T>(out, x, [](M v) { return v * v; });
      if (op.a == 3) return map1<T, T>(out, x, [](M v) { return v * v * v; });
      if (op.a == 1) return map1<T, T>(out, x, [](M v) { return v; });
      if (op.a == 0.5) return map1<T, T>(out, x, [](M v) { return std::sqrt(v); });
      if (op.a == -1) return map1<T, T>(out, x, [](M v) { return M(1) / v; });
      return map1<T, T>(out, x, [a](M v) { return std::pow(v, a); });
    case UnaryKind::clamp:  // NaN passes through, as in torch.clamp
      return map1<T, T>(out, x, [a, b](M v) { return v < a ? a : (v > b ? b : v); });
  }
  fail("unary: unknown kind {}", static_cast<int>(op.kind));
}

/// A double bound clamped into I's range (the ±inf of an absent clamp bound included).
template <class I> I int_bound(double v) {
  if (v <= static_cast<double>(std::numeric_limits<I>::lowest())) return std::numeric_limits<I>::lowest();
  if (v >= static_cast<double>(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return static_cast<I>(v);
}

template <class T>
void unary_integral(const UnaryOp& op, Tensor& out, const Tensor& x) {
  switch (op.kind) {
    case UnaryKind::neg: return map1<T, T>(out, x, [](T v) { return static_cast<T>(-v); });
    case UnaryKind::abs: return map1<T, T>(out, x, [](T v) { return v < 0 ? static_cast<T>(-v) : v; });
    case UnaryKind::relu: return map1<T, T>(out, x, [](T v) { return v < 0 ? T(0) : v; });
    case UnaryKind::square: return map1<T, T>(out, x, [](T v) { return static_cast<T>(v * v); });
    case UnaryKind::sign: return map1<T, T>(out, x, [](T v) { return static_cast<T>((T(0) < v) - (v < T(0))); });
    case UnaryKind::pow_scalar: {
      const T e = static_cast<T>(op.a);
      return map1<T, T>(out, x, [e](T v) { return int_pow(v, e); });
    }
    case UnaryKind::clamp: {
      const T lo = int_bound<T>(op.a), hi = int_bound<T>(op.b);
      return map1<T, T>(out, x, [lo, hi](T v) { return v < lo ? lo : (v > hi ? hi : v); });
    }
    default:
      fail("unary {}: not defined for integer dtype {} (promote to a floating dtype first)",
           kind_name(op.kind), out.dtype());
  }
}

void unary_kernel(const UnaryOp& op, Tensor& out, const Tensor& x) {
  KILN_CHECK(out.dtype() == x.dtype(), "unary {}: input dtype {} differs from output dtype {}",
             kind_name(op.kind), x.dtype(), out.dtype());
  if (is_floating(out.dtype())) {
    KILN_DISPATCH_FLOATING(out.dtype(), "unary", [&]<class T>() { unary_floating<T>(op, out, x); });
  } else if (is_integral(out.dtype(), /*include_bool=*/false)) {
    KILN_DISPATCH_NUMERIC(out.dtype(), "unary", [&]<class T>() {
      if constexpr (std::is_integral_v<T>) unary_integral<T>(op, out, x);
    });
  } else {
    fail("unary {}: dtype {} is not supported", kind_name(op.kind), out.dtype());
  }
}

// ---- binary

/// out[0, m) for the transcendental backward kinds (gelu, silu) on contiguous spans.
template <class T>
void eigen_binary_span(BinaryKind kind, T* out, const T* g, const T* xs, int64_t m) {
  using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<const Arr> gv(g, m), x(xs, m);
  Eigen::Map<Arr> d(out, m);
  const T one(1);
  if (kind == BinaryKind::gelu_backward) {
    d = gv * (T(0.5) * (one + (x * T(kInvSqrt2)).erf()) + x * (T(-0.5) * x.square()).exp() * T(kInvSqrt2Pi));
  } else {
    // The sigmoid is staged in a block buffer so it is computed once per element, whatever
    // out aliases.
    constexpr int64_t kBlock = 512;
    alignas(64) T sb[kBlock];
    for (int64_t blk = 0; blk < m; blk += kBlock) {
      const int64_t len = std::min(kBlock, m - blk);
      Eigen::Map<Arr> s(sb, len);
      auto xv = x.segment(blk, len);
      s = (one + (-xv).exp()).inverse();
      d.segment(blk, len) = gv.segment(blk, len) * s * (one + xv * (one - s));
    }
  }
}

/// Vectorised gelu/silu backward for contiguous operands (16-bit floats through float buffers).
template <class T>
bool binary_eigen(BinaryKind kind, Tensor& out, const Tensor& a, const Tensor& b) {
  if (kind != BinaryKind::gelu_backward && kind != BinaryKind::silu_backward) return false;
  if (!out.is_contiguous() || !a.is_contiguous() || !b.is_contiguous()) return false;
  T* o = static_cast<T*>(out.data_ptr());
  const T* g = static_cast<const T*>(a.data_ptr());
  const T* xs = static_cast<const T*>(b.data_ptr());
  parallel_for(0, out.numel(), kTranscendentalGrain, [&](int64_t lo, int64_t hi) {
    if constexpr (is_eigen_float_v<T>) {
      eigen_binary_span<T>(kind, o + lo, g + lo, xs + lo, hi - lo);
    } else {
      constexpr int64_t kBlock = 512;
      alignas(64) float gb[kBlock], xb[kBlock], ob[kBlock];
      for (int64_t blk = lo; blk < hi; blk += kBlock) {
        const int64_t m = std::min(kBlock, hi - blk);
        for (int64_t j = 0; j < m; ++j) {
          gb[j] = static_cast<float>(g[blk + j]);
          xb[j] = static_cast<float>(xs[blk + j]);
        }
        eigen_binary_span<float>(kind, ob, gb, xb, m);
        for (int64_t j = 0; j < m; ++j) o[blk + j] = static_cast<T>(ob[j]);
      }
    }
  });
  return true;
}

template <class T>
void binary_floating(BinaryKind kind, Tensor& out, const Tensor& a, const Tensor& b) {
  using M = opmath_t<T>;
  if (binary_eigen<T>(kind, out, a, b)) return;
  switch (kind) {
    case BinaryKind::add: return map2<T, T, T>(out, a, b, [](M x, M y) { return x + y; });
    case BinaryKind::sub: return map2<T, T, T>(out, a, b, [](M x, M y) { return x - y; });
    case BinaryKind::mul: return map2<T, T, T>(out, a, b, [](M x, M y) { return x * y; });
    case BinaryKind::div: return map2<T, T, T>(out, a, b, [](M x, M y) { return x / y; });
    case BinaryKind::pow: return map2<T, T, T>(out, a, b, [](M x, M y) { return std::pow(x, y); });
    // NaN in either operand gives NaN, as torch.maximum/minimum.
    case BinaryKind::maximum:
      return map2<T, T, T>(out, a, b, [](M x, M y) { return x != x ? x : (x > y ? x : y); });
    case BinaryKind::minimum:
      return map2<T, T, T>(out, a, b, [](M x, M y) { return x != x ? x : (x < y ? x : y); });
    case BinaryKind::relu_backward:
      return map2<T, T, T>(out, a, b, [](M g, M x) { return x > M(0) ? g : M(0); });
    case BinaryKind::gelu_backward:
      return map2<T, T, T>(out, a, b, [](M g, M x) { return g * gelu_grad_of(x); });
    case BinaryKind::silu_backward:
      return map2<T, T, T>(out, a, b, [](M g, M x) { return g * silu_grad_of(x); });
    case BinaryKind::sigmoid_backward:
      return map2<T, T, T>(out, a, b, [](M g, M y) { return g * y * (M(1) - y); });
    case BinaryKind::tanh_backward:
      return map2<T, T, T>(out, a, b, [](M g, M y) { return g * (M(1) - y * y); });
  }
  fail("binary: unknown kind {}", static_cast<int>(kind));
}

template <class T>
void binary_integral(BinaryKind kind, Tensor& out, const Tensor& a, const Tensor& b) {
  switch (kind) {
    case BinaryKind::add: return map2<T, T, T>(out, a, b, [](T x, T y) { return static_cast<T>(x + y); });
    case BinaryKind::sub: return map2<T, T, T>(out, a, b, [](T x, T y) { return static_cast<T>(x - y); });
    case BinaryKind::mul: return map2<T, T, T>(out, a, b, [](T x, T y) { return static_cast<T>(x * y); });
    case BinaryKind::pow: return map2<T, T, T>(out, a, b, [](T x, T y) { return int_pow(x, y); });
    case BinaryKind::maximum: return map2<T, T, T>(out, a, b, [](T x, T y) { return x > y ? x : y; });
    case BinaryKind::minimum: return map2<T, T, T>(out, a, b, [](T x, T y) { return x < y ? x : y; });
    default:
      fail("binary {}: not defined for integer dtype {} (promote to a floating dtype first)", kind_name(kind),
           out.dtype());
  }
}

void binary_bool(BinaryKind kind, Tensor& out, const Tensor& a, const Tensor& b) {
  switch (kind) {  // bool arithmetic as PyTorch: + and max are "or", * and min are "and"
    case BinaryKind::add:
    case BinaryKind::maximum: return map2<bool, bool, bool>(out, a, b, [](bool x, bool y) { return x || y; });
    case BinaryKind::mul:
    case BinaryKind::minimum: return map2<bool, bool, bool>(out, a, b, [](bool x, bool y) { return x && y; });
    default: fail("binary {}: not defined for bool tensors", kind_name(kind));
  }
}

void binary_kernel(BinaryKind kind, Tensor& out, const Tensor& a, const Tensor& b) {
  KILN_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype(),
             "binary {}: operand dtypes {} and {} differ from output dtype {}", kind_name(kind), a.dtype(),
             b.dtype(), out.dtype());
  const DType dt = out.dtype();
  if (is_floating(dt)) {
    KILN_DISPATCH_FLOATING(dt, "binary", [&]<class T>() { binary_floating<T>(kind, out, a, b); });
  } else if (dt == kBool) {
    binary_bool(kind, out, a, b);
  } else {
    KILN_DISPATCH_NUMERIC(dt, "binary", [&]<class T>() {
      if constexpr (std::is_integral_v<T>) binary_integral<T>(kind, out, a, b);
    });
  }
}

// ---- compare and where

void compare_kernel(CompareKind kind, Tensor& out, const Tensor& a, const Tensor& b) {
  KILN_CHECK(out.dtype() == kBool, "compare {}: output must be bool, got {}", kind_name(kind), out.dtype());
  KILN_CHECK(a.dtype() == b.dtype(), "compare {}: operand dtypes {} and {} differ", kind_name(kind), a.dtype(),
             b.dtype());
  KILN_DISPATCH_ALL(a.dtype(), "compare", [&]<class T>() {
    using M = opmath_t<T>;
    switch (kind) {
      case CompareKind::eq: return map2<bool, T, T>(out, a, b, [](M x, M y) { return x == y; });
      case CompareKind::ne: return map2<bool, T, T>(out, a, b, [](M x, M y) { return x != y; });
      case CompareKind::lt: return map2<bool, T, T>(out, a, b, [](M x, M y) { return x < y; });
      case CompareKind::le: return map2<bool, T, T>(out, a, b, [](M x, M y) { return x <= y; });
      case CompareKind::gt: return map2<bool, T, T>(out, a, b, [](M x, M y) { return x > y; });
      case CompareKind::ge: return map2<bool, T, T>(out, a, b, [](M x, M y) { return x >= y; });
    }
  });
}

void where_kernel(Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b) {
  KILN_CHECK(cond.dtype() == kBool, "where: condition must be bool, got {}", cond.dtype());
  KILN_CHECK(a.dtype() == out.dtype() && b.dtype() == out.dtype(),
             "where: operand dtypes {} and {} differ from output dtype {}", a.dtype(), b.dtype(), out.dtype());
  // Selection only moves bits, so any dtype of a given width shares one loop.
  auto run = [&]<class U>() {
    map3<U, bool, U, U>(out, cond, a, b, [](bool c, U x, U y) { return c ? x : y; });
  };
  switch (out.element_size()) {
    case 1: return run.template operator()<uint8_t>();
    case 2: return run.template operator()<uint16_t>();
    case 4: return run.template operator()<uint32_t>();
    case 8: return run.template operator()<uint64_t>();
    default: fail("where: unsupported element size {}", out.element_size());
  }
}

}  // namespace

KILN_REGISTER_KERNEL(unary, DeviceType::CPU, &unary_kernel);
KILN_REGISTER_KERNEL(binary, DeviceType::CPU, &binary_kernel);
KILN_REGISTER_KERNEL(compare, DeviceType::CPU, &compare_kernel);
KILN_REGISTER_KERNEL(where, DeviceType::CPU, &where_kernel);

}  // namespace kiln::cpu
