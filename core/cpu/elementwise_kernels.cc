// CPU elementwise kernels: unary (forward and backward, the formulas of core/elementwise_ops.h),
// binary, compare and where. 16-bit floats compute in float (opmath_t); integer dtypes get the
// kinds whose row allows them (core/ops validated that). Contiguous f32/f64 transcendental ops run
// through Eigen's vectorised array functions (f32 gelu_tanh and its gradient through
// core/cpu/gelu_tanh_vec.h, at 16 lanes where the CPU has AVX-512), split across threads;
// everything else goes through map1/map2/map3, whose contiguous paths vectorise.
#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/cpu/gelu_tanh_vec.h"
#include "core/cpu/isa.h"
#include "core/cpu/loops.h"
#include "core/elementwise_ops.h"
#include "core/kernels.h"

namespace kiln::cpu {
namespace {

// Transcendental ops cost ~10x a plain add per element, so they are worth splitting sooner.
constexpr int64_t kTranscendentalGrain = kGrainSize / 8;

template <class T> constexpr bool is_eigen_float_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

// ---- unary: the optional vectorised paths (Eigen array functions), then the generic loops over
// the registry's scalar formulas (core/elementwise_ops.h)

/// out[0, m) = kind(in[0, m)) for one contiguous span (in may equal out). False, doing nothing,
/// for a kind without a vectorised path: plain arithmetic is left to map1, which the compiler
/// vectorises by itself.
template <class T>
bool eigen_unary_span(UnaryKind kind, T* out, const T* in, int64_t m) {
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
    case UnaryKind::gelu: d = T(0.5) * v * (one + (v * T(unary_fn::kInvSqrt2)).erf()); break;
    case UnaryKind::gelu_tanh:
      if constexpr (std::is_same_v<T, float>) {
        use_avx512() ? gelu_tanh_f32_avx512(out, in, m) : gelu_tanh_f32(out, in, m);
      } else {
        d = T(0.5) * v * (one + (T(unary_fn::kSqrt2OverPi) * (v + T(unary_fn::kGeluKappa) * v.cube())).tanh());
      }
      break;
    default: return false;
  }
  return true;
}

/// parallel_for over [0, n) of a contiguous output `out` whose ranges meet only at elements with a
/// 64-byte aligned address (16-bit types: at multiples of 64 elements). Eigen computes the
/// elements before a span's first aligned one and after its last whole packet with scalar
/// functions (std::exp, ...), which round differently from its vector ones; with these
/// boundaries every element takes the same path at any thread count.
template <class T, class F> void parallel_for_aligned(const T* out, int64_t n, const F& f) {
  constexpr int64_t kUnit = 64;  // elements: whole packets and cache lines
  int64_t head = 0;
  if constexpr (is_eigen_float_v<T>) {
    const auto addr = reinterpret_cast<uintptr_t>(out);
    if (addr % sizeof(T) == 0) head = std::min<int64_t>(n, static_cast<int64_t>((64 - addr % 64) % 64 / sizeof(T)));
  }
  // Unit 0 is [0, head), unit u > 0 starts at head + (u - 1) * kUnit.
  const int64_t units = 1 + (n - head + kUnit - 1) / kUnit;
  auto start = [&](int64_t u) { return u == 0 ? 0 : std::min(n, head + (u - 1) * kUnit); };
  parallel_for(0, units, std::max<int64_t>(1, kTranscendentalGrain / kUnit), [&](int64_t ub, int64_t ue) {
    const int64_t b = start(ub), e = ue == units ? n : start(ue);
    if (b < e) f(b, e);
  });
}

/// The vectorised path for contiguous operands: f32/f64 straight through Eigen, 16-bit floats
/// through a float buffer per block. False when `op` has none.
template <class T>
bool unary_eigen(const UnaryOp& op, Tensor& out, const Tensor& x) {
  if (!eigen_unary_span<float>(op.kind, nullptr, nullptr, 0)) return false;  // probe: has a path?
  if (!out.is_contiguous() || !x.is_contiguous()) return false;
  T* o = static_cast<T*>(out.data_ptr());
  const T* in = static_cast<const T*>(x.data_ptr());
  parallel_for_aligned(o, out.numel(), [&](int64_t b, int64_t e) {
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

/// One loop per kind (a switch outside the loop, so each loop body is one formula the compiler
/// can vectorise). T is the storage type, M the math type; integer T only for `numeric` kinds.
template <class T, class M>
void unary_loop(UnaryKind kind, Tensor& out, const Tensor& x, M a, M b) {
  switch (kind) {
#define KILN_CPU_UNARY_(NAME, DT, ...)                                                     \
  case UnaryKind::NAME:                                                                    \
    if constexpr (std::is_integral_v<M> && KindDTypes::DT != KindDTypes::numeric) break;   \
    else return map1<T, T>(out, x, [a, b](M v) { return unary_fn::NAME(v, a, b); });
    KILN_UNARY_OPS(KILN_CPU_UNARY_)
#undef KILN_CPU_UNARY_
  }
  fail("unary {}: not defined for dtype {}", kind_name(kind), out.dtype());
}

template <class T>
void unary_floating(const UnaryOp& op, Tensor& out, const Tensor& x) {
  using M = opmath_t<T>;
  if (unary_eigen<T>(op, out, x)) return;
  if (op.kind == UnaryKind::pow_scalar) {  // common exponents skip std::pow (and vectorise)
    if (op.a == 2) return map1<T, T>(out, x, [](M v) { return v * v; });
    if (op.a == 3) return map1<T, T>(out, x, [](M v) { return v * v * v; });
    if (op.a == 1) return map1<T, T>(out, x, [](M v) { return v; });
    if (op.a == 0.5) return map1<T, T>(out, x, [](M v) { return std::sqrt(v); });
    if (op.a == -1) return map1<T, T>(out, x, [](M v) { return M(1) / v; });
    const M e = static_cast<M>(op.a);
    return map1<T, T>(out, x, [e](M v) { return std::pow(v, e); });
  }
  unary_loop<T, M>(op.kind, out, x, static_cast<M>(op.a), static_cast<M>(op.b));
}

void unary_kernel(const UnaryOp& op, Tensor& out, const Tensor& x) {
  if (is_floating(out.dtype())) {
    KILN_DISPATCH_FLOATING(out.dtype(), "unary", [&]<class T>() { unary_floating<T>(op, out, x); });
  } else {
    KILN_DISPATCH_NUMERIC(out.dtype(), "unary", [&]<class T>() {
      if constexpr (std::is_integral_v<T>) unary_loop<T, T>(op.kind, out, x, int_bound<T>(op.a), int_bound<T>(op.b));
    });
  }
}

// ---- unary backward: vectorised gelu/silu, then the registry's grad column

/// The end of the staging block of at most `block` elements that starts at blk: before out's
/// first 64-byte aligned element, then every `block` (a multiple of 16). As the spans start at
/// aligned elements (parallel_for_aligned), Eigen's scalar tails in a block buffer then fall on
/// the same elements at any thread count.
template <class T> int64_t block_end(const T* out, int64_t blk, int64_t m, int64_t block) {
  const auto addr = reinterpret_cast<uintptr_t>(out + blk);
  const int64_t to_aligned = addr % sizeof(T) == 0 ? static_cast<int64_t>((64 - addr % 64) % 64 / sizeof(T)) : 0;
  return std::min(m, blk + (to_aligned > 0 ? to_aligned : block));
}

/// out[0, m) for the transcendental backward kinds (gelu, gelu_tanh, silu) on contiguous spans;
/// false for the others. (The scalar tanh of gelu_tanh's grad column was a fifth of a GPT step.)
template <class T>
bool eigen_unary_backward_span(UnaryKind kind, T* out, const T* g, const T* xs, int64_t m) {
  if (kind != UnaryKind::gelu && kind != UnaryKind::silu && kind != UnaryKind::gelu_tanh) return false;
  using Arr = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<const Arr> gv(g, m), x(xs, m);
  Eigen::Map<Arr> d(out, m);
  const T one(1);
  if (kind == UnaryKind::gelu) {
    d = gv * (T(0.5) * (one + (x * T(unary_fn::kInvSqrt2)).erf()) +
              x * (T(-0.5) * x.square()).exp() * T(unary_fn::kInvSqrt2Pi));
  } else if (kind == UnaryKind::gelu_tanh) {
    if constexpr (std::is_same_v<T, float>) {
      use_avx512() ? gelu_tanh_backward_f32_avx512(out, g, xs, m) : gelu_tanh_backward_f32(out, g, xs, m);
      return true;
    }
    // unary_fn::gelu_tanh_grad, with tanh staged once per element in a block buffer.
    constexpr int64_t kBlock = 512;
    alignas(64) T tb[kBlock];
    const T c(unary_fn::kSqrt2OverPi), k(unary_fn::kGeluKappa);
    for (int64_t blk = 0, end; blk < m; blk = end) {
      end = block_end(out, blk, m, kBlock);
      const int64_t len = end - blk;
      Eigen::Map<Arr> t(tb, len);
      auto xv = x.segment(blk, len);
      t = (c * (xv + k * xv.cube())).tanh();
      d.segment(blk, len) = gv.segment(blk, len) * (T(0.5) * (one + t) + T(0.5) * xv * (one - t.square()) * c *
                                                                              (one + T(3) * k * xv.square()));
    }
  } else {
    // The sigmoid is staged in a block buffer so it is computed once per element, whatever
    // out aliases.
    constexpr int64_t kBlock = 512;
    alignas(64) T sb[kBlock];
    for (int64_t blk = 0, end; blk < m; blk = end) {
      end = block_end(out, blk, m, kBlock);
      const int64_t len = end - blk;
      Eigen::Map<Arr> s(sb, len);
      auto xv = x.segment(blk, len);
      s = (one + (-xv).exp()).inverse();
      d.segment(blk, len) = gv.segment(blk, len) * s * (one + xv * (one - s));
    }
  }
  return true;
}

/// Vectorised backward for contiguous operands (16-bit floats through float buffers).
template <class T>
bool unary_backward_eigen(UnaryKind kind, Tensor& out, const Tensor& a, const Tensor& b) {
  if (!eigen_unary_backward_span<float>(kind, nullptr, nullptr, nullptr, 0)) return false;
  if (!out.is_contiguous() || !a.is_contiguous() || !b.is_contiguous()) return false;
  T* o = static_cast<T*>(out.data_ptr());
  const T* g = static_cast<const T*>(a.data_ptr());
  const T* xs = static_cast<const T*>(b.data_ptr());
  parallel_for_aligned(o, out.numel(), [&](int64_t lo, int64_t hi) {
    if constexpr (is_eigen_float_v<T>) {
      eigen_unary_backward_span<T>(kind, o + lo, g + lo, xs + lo, hi - lo);
    } else {
      constexpr int64_t kBlock = 512;
      alignas(64) float gb[kBlock], xb[kBlock], ob[kBlock];
      for (int64_t blk = lo; blk < hi; blk += kBlock) {
        const int64_t m = std::min(kBlock, hi - blk);
        for (int64_t j = 0; j < m; ++j) {
          gb[j] = static_cast<float>(g[blk + j]);
          xb[j] = static_cast<float>(xs[blk + j]);
        }
        eigen_unary_backward_span<float>(kind, ob, gb, xb, m);
        for (int64_t j = 0; j < m; ++j) o[blk + j] = static_cast<T>(ob[j]);
      }
    }
  });
  return true;
}

/// One loop per kind, as unary_loop.
template <class T>
void unary_backward_loop(const UnaryOp& op, Tensor& grad_x, const Tensor& grad_y, const Tensor& saved) {
  using M = opmath_t<T>;
  if (unary_backward_eigen<T>(op.kind, grad_x, grad_y, saved)) return;
  const M a = static_cast<M>(op.a), b = static_cast<M>(op.b);
  switch (op.kind) {
#define KILN_CPU_UNARY_GRAD_(NAME, ...)                                                         \
  case UnaryKind::NAME:                                                                         \
    return map2<T, T, T>(grad_x, grad_y, saved,                                                 \
                         [a, b](M g, M s) { return unary_fn::NAME##_grad_of(g, s, a, b); });
    KILN_UNARY_OPS(KILN_CPU_UNARY_GRAD_)
#undef KILN_CPU_UNARY_GRAD_
  }
}

void unary_backward_kernel(const UnaryOp& op, Tensor& grad_x, const Tensor& grad_y, const Tensor& saved) {
  KILN_DISPATCH_FLOATING(grad_x.dtype(), "unary_backward",
                         [&]<class T>() { unary_backward_loop<T>(op, grad_x, grad_y, saved); });
}

// ---- binary

template <class T>
void binary_floating(BinaryKind kind, Tensor& out, const Tensor& a, const Tensor& b) {
  using M = opmath_t<T>;
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
KILN_REGISTER_KERNEL(unary_backward, DeviceType::CPU, &unary_backward_kernel);
KILN_REGISTER_KERNEL(binary, DeviceType::CPU, &binary_kernel);
KILN_REGISTER_KERNEL(compare, DeviceType::CPU, &compare_kernel);
KILN_REGISTER_KERNEL(where, DeviceType::CPU, &where_kernel);

}  // namespace kiln::cpu
