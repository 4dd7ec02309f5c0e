// Every CUDA elementwise kernel (fill, copy/cast, unary, binary) against the CPU kernel on
// random non-zero inputs, for f32/f16/bf16/f64/i32/i64, contiguous (vectorised path, odd sizes
// for the tail), transposed, sliced and broadcast operands. Skipped without a GPU.
#include <doctest/doctest.h>

#include <limits>
#include <vector>

#include "core/kernels.h"
#include "core/ops.h"
#include "cuda/allocator.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

namespace {

const Device kGpu("cuda:0");
const std::vector<DType> kFloats = {kFloat32, kFloat16, kBFloat16, kFloat64};
const std::vector<DType> kAll = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64};

/// Random non-zero values of `dtype` on the CPU: floats in (lo, hi), integers in [-9, 9] \ {0}.
Tensor random_input(const Shape& shape, DType dtype, double lo = -3, double hi = 3) {
  if (is_floating(dtype)) {
    Tensor u = rand(shape, kFloat64) * (hi - lo) + lo;
    u = where(u.abs() < 1e-3, full(shape, 0.5, kFloat64), u);
    return u.to(dtype);
  }
  Tensor r = randint(1, 10, shape, kInt64) * (randint(0, 2, shape, kInt64) * 2 - 1);
  return r.to(dtype);
}

void check_close(const Tensor& gpu, const Tensor& cpu, const std::string& what) {
  const double tol = test::tolerance(cpu.dtype());
  CHECK_MESSAGE(test::allclose(gpu.to(kCPU), cpu, tol, tol), what);
}

/// Layouts the same logical values can come in: contiguous (sizes with a ragged tail),
/// transposed, a strided slice.
std::vector<std::pair<std::string, Tensor>> layouts(const Tensor& base) {
  return {{"contiguous", base}, {"transposed", base.transpose(0, 1)}, {"sliced", base.slice(1, 1, base.size(1), 2)}};
}

}  // namespace

TEST_CASE("fill matches the CPU for every dtype") {
  KILN_REQUIRE_GPU();
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kBool}) {
    Tensor g = empty({37, 5}, dtype(t).device(kGpu));
    g.fill_(Scalar(2.75));
    Tensor c = empty({37, 5}, t);
    c.fill_(Scalar(2.75));
    check_close(g.to(kFloat64), c.to(kFloat64), fmt::format("fill {}", t));
  }
}

TEST_CASE("host <-> device copies round-trip, pinned and not") {
  KILN_REQUIRE_GPU();
  for (DType t : kAll) {
    Tensor x = random_input({1000, 3}, t);
    Tensor back = x.to(kGpu).to(kCPU);
    CHECK_MESSAGE(test::allclose(back, x, 0, 0), fmt::format("round trip {}", t));
  }
  Tensor x = random_input({4096}, kFloat32);
  Tensor p = cuda::pin_memory(x);
  CHECK(cuda::is_pinned(p));
  CHECK_FALSE(cuda::is_pinned(x));
  CHECK(test::allclose(p.to(kGpu).to(kCPU), x, 0, 0));
}

TEST_CASE("copy casts between every pair of dtypes as the CPU does") {
  KILN_REQUIRE_GPU();
  for (DType from : kAll) {
    Tensor x = random_input({33, 17}, from, -100, 100);
    Tensor xg = x.to(kGpu);
    for (DType to : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kBool}) {
      for (auto& [name, view] : layouts(x)) {
        Tensor gview = name == "contiguous" ? xg : name == "transposed" ? xg.transpose(0, 1) : xg.slice(1, 1, 17, 2);
        Tensor gc = empty(view.sizes(), dtype(to).device(kGpu));
        kernels::copy[kGpu](gc, gview);
        Tensor cc = empty(view.sizes(), to);
        kernels::copy[kCPU](cc, view);
        CHECK_MESSAGE(test::allclose(gc.to(kCPU).to(kFloat64), cc.to(kFloat64), 0, 0),
                      fmt::format("copy {} -> {} ({})", from, to, name));
      }
    }
  }
}

TEST_CASE("unary kernels match the CPU kernels") {
  KILN_REQUIRE_GPU();
  const std::vector<UnaryOp> ops = {
      {UnaryKind::neg},     {UnaryKind::abs},      {UnaryKind::exp},     {UnaryKind::log},
      {UnaryKind::sqrt},    {UnaryKind::rsqrt},    {UnaryKind::sin},     {UnaryKind::cos},
      {UnaryKind::tanh},    {UnaryKind::sigmoid},  {UnaryKind::relu},    {UnaryKind::gelu},
      {UnaryKind::silu},    {UnaryKind::square},   {UnaryKind::sign},    {UnaryKind::log1p},
      {UnaryKind::expm1},   {UnaryKind::reciprocal}, {UnaryKind::pow_scalar, 3}, {UnaryKind::pow_scalar, 1.7},
      {UnaryKind::clamp, -0.5, 1.25}, {UnaryKind::softplus, 1, 20}, {UnaryKind::softplus, 2, 1},
      {UnaryKind::leaky_relu, 0.1}, {UnaryKind::elu, 1.3}, {UnaryKind::hardtanh, -0.7, 1.1},
      {UnaryKind::hardswish},  {UnaryKind::gelu_tanh}};
  const auto positive_only = [](UnaryKind k) {
    return k == UnaryKind::log || k == UnaryKind::sqrt || k == UnaryKind::rsqrt || k == UnaryKind::log1p;
  };
  for (DType t : kFloats) {
    for (const UnaryOp& op : ops) {
      const bool pos = positive_only(op.kind) || (op.kind == UnaryKind::pow_scalar && op.a == 1.7);
      Tensor x = random_input({129, 67}, t, pos ? 0.1 : -3, 3);
      Tensor xg = x.to(kGpu);
      for (auto& [name, view] : layouts(x)) {
        Tensor gview = name == "contiguous" ? xg : name == "transposed" ? xg.transpose(0, 1) : xg.slice(1, 1, 67, 2);
        Tensor go = empty(view.sizes(), dtype(t).device(kGpu));
        kernels::unary[kGpu](op, go, gview);
        Tensor co = empty(view.sizes(), t);
        kernels::unary[kCPU](op, co, view);
        check_close(go, co, fmt::format("unary {} {} ({})", kind_name(op.kind), t, name));
      }
    }
  }
  for (DType t : {kInt32, kInt64}) {
    for (const UnaryOp& op : std::vector<UnaryOp>{{UnaryKind::neg}, {UnaryKind::abs}, {UnaryKind::relu},
                                                 {UnaryKind::square}, {UnaryKind::sign}, {UnaryKind::pow_scalar, 3},
                                                 {UnaryKind::clamp, -4, 5}}) {
      Tensor x = random_input({257, 3}, t);
      Tensor go = empty(x.sizes(), dtype(t).device(kGpu));
      kernels::unary[kGpu](op, go, x.to(kGpu));
      Tensor co = empty(x.sizes(), t);
      kernels::unary[kCPU](op, co, x);
      CHECK_MESSAGE(test::allclose(go.to(kCPU), co, 0, 0), fmt::format("unary {} {}", kind_name(op.kind), t));
    }
  }
}

TEST_CASE("unary backward kernels match the CPU kernels for every registry row") {
  KILN_REQUIRE_GPU();
  for (int k = 0; k < kNumUnaryKinds; ++k) {
    const auto kind = static_cast<UnaryKind>(k);
    // Parameters that make every row's interesting branch reachable from [-3, 3].
    const UnaryOp op = kind == UnaryKind::clamp || kind == UnaryKind::hardtanh ? UnaryOp{kind, -0.5, 1.25}
                       : kind == UnaryKind::softplus                           ? UnaryOp{kind, 2, 1}
                       : kind == UnaryKind::pow_scalar                         ? UnaryOp{kind, 2.5}
                                                                               : UnaryOp{kind, 0.3, 0};
    for (DType t : kFloats) {
      // Non-zero inputs; positive where the derivative needs it (log, sqrt, rsqrt, pow 2.5, ...).
      Tensor g = random_input({97, 33}, t, -2, 2), s = random_input({97, 33}, t, 0.2, 3);
      if (kind != UnaryKind::log && kind != UnaryKind::sqrt && kind != UnaryKind::rsqrt &&
          kind != UnaryKind::log1p && kind != UnaryKind::pow_scalar && kind != UnaryKind::reciprocal)
        s = random_input({97, 33}, t, -3, 3);
      Tensor go = empty(g.sizes(), dtype(t).device(kGpu));
      kernels::unary_backward[kGpu](op, go, g.to(kGpu), s.to(kGpu));
      Tensor co = empty(g.sizes(), t);
      kernels::unary_backward[kCPU](op, co, g, s);
      check_close(go, co, fmt::format("unary_backward {} {}", kind_name(kind), t));
    }
  }
}

TEST_CASE("binary kernels match the CPU kernels, broadcast and strided operands included") {
  KILN_REQUIRE_GPU();
  const std::vector<BinaryKind> float_kinds = {
      BinaryKind::add,           BinaryKind::sub,           BinaryKind::mul,
      BinaryKind::div,           BinaryKind::pow,           BinaryKind::maximum,
      BinaryKind::minimum};
  for (DType t : kAll) {
    const bool fl = is_floating(t);
    for (BinaryKind k : float_kinds) {
      if (!fl && k == BinaryKind::div) continue;
      Tensor a = random_input({65, 130}, t, k == BinaryKind::pow ? 0.2 : -3, 3);
      Tensor b = random_input({65, 130}, t, -2, 2);
      if (!fl && k == BinaryKind::pow) b = b.abs().clamp(0, 3);
      Tensor row = random_input({1, 130}, t, -2, 2);  // broadcast along dim 0
      if (!fl && k == BinaryKind::pow) row = row.abs().clamp(0, 3);
      struct Case {
        std::string name;
        Tensor a, b;
      };
      std::vector<Case> cases = {
          {"contiguous", a, b},
          {"broadcast row", a, row.expand({65, 130})},
          {"transposed", a.transpose(0, 1), b.transpose(0, 1)},
          // Both 65 x 43: columns 0, 3, ..., 126 of a and 1, 4, ..., 127 of b.
          {"sliced", a.slice(1, 0, 129, 3), b.slice(1, 1, 129, 3)},
      };
      for (auto& c : cases) {
        Tensor go = empty(c.a.sizes(), dtype(t).device(kGpu));
        // Views of device copies with the same geometry as the CPU operands.
        Tensor ga = c.a.to(kGpu), gb = c.b.contiguous().to(kGpu);
        if (c.name == "broadcast row") gb = row.to(kGpu).expand({65, 130});
        if (c.name == "transposed") {
          ga = a.to(kGpu).transpose(0, 1);
          gb = b.to(kGpu).transpose(0, 1);
        }
        if (c.name == "sliced") {
          ga = a.to(kGpu).slice(1, 0, 129, 3);
          gb = b.to(kGpu).slice(1, 1, 129, 3);
        }
        kernels::binary[kGpu](k, go, ga, gb);
        Tensor co = empty(c.a.sizes(), t);
        kernels::binary[kCPU](k, co, c.a, c.b);
        check_close(go, co, fmt::format("binary {} {} ({})", kind_name(k), t, c.name));
      }
    }
  }
}

TEST_CASE("ops on CUDA tensors run end to end through the op table") {
  KILN_REQUIRE_GPU();
  Tensor x = random_input({300, 41}, kFloat32), y = random_input({41}, kFloat32);
  Tensor g = (x.to(kGpu) * y.to(kGpu) + 1).relu().exp().to(kCPU);
  check_close(g, (x * y + 1).relu().exp(), "(x * y + 1).relu().exp()");
  Tensor h = x.to(kGpu).to(kFloat16).to(kFloat32).to(kCPU);
  check_close(h, x.to(kFloat16).to(kFloat32), "f32 -> f16 -> f32");
}

TEST_CASE("a dtype a CUDA kernel lacks fails loudly naming the op") {
  KILN_REQUIRE_GPU();
  Tensor a = random_input({2, 3, 3}, kInt64).to(kGpu);
  Tensor out = empty({2, 3, 3}, dtype(kInt64).device(kGpu));
  CHECK_THROWS_WITH_AS(kernels::bmm[kGpu](out, a, a), doctest::Contains("bmm (cuda): dtype i64 is not supported"),
                       kiln::Error);
  // Elementwise kernels trust core's validation (core/kernels.h), which names the op.
  Tensor f = empty({2, 3, 3}, dtype(kBool).device(kGpu));
  CHECK_THROWS_WITH_AS(kiln::neg(f), doctest::Contains("neg"), kiln::Error);
}

TEST_CASE("compare, where and arange match the CPU") {
  KILN_REQUIRE_GPU();
  for (DType t : kAll) {
    Tensor a = random_input({45, 77}, t), b = random_input({45, 77}, t);
    b = where(rand({45, 77}) < 0.3, a, b);  // some equal pairs
    Tensor row = random_input({1, 77}, t);
    for (CompareKind k : {CompareKind::eq, CompareKind::ne, CompareKind::lt, CompareKind::le, CompareKind::gt,
                          CompareKind::ge}) {
      Tensor go = empty({45, 77}, dtype(kBool).device(kGpu));
      kernels::compare[kGpu](k, go, a.to(kGpu), row.to(kGpu).expand({45, 77}));
      Tensor co = empty({45, 77}, kBool);
      kernels::compare[kCPU](k, co, a, row.expand({45, 77}));
      CHECK_MESSAGE(test::allclose(go.to(kCPU).to(kInt64), co.to(kInt64), 0, 0),
                    fmt::format("compare {} {} (broadcast)", kind_name(k), t));
      kernels::compare[kGpu](k, go, a.to(kGpu).transpose(0, 1).transpose(0, 1), b.to(kGpu));
      kernels::compare[kCPU](k, co, a, b);
      CHECK_MESSAGE(test::allclose(go.to(kCPU).to(kInt64), co.to(kInt64), 0, 0),
                    fmt::format("compare {} {}", kind_name(k), t));
    }
    Tensor cond = rand({45, 77}) < 0.5;
    Tensor go = empty({77, 45}, dtype(t).device(kGpu));
    kernels::where[kGpu](go, cond.to(kGpu).transpose(0, 1), a.to(kGpu).transpose(0, 1),
                         row.to(kGpu).expand({45, 77}).transpose(0, 1));
    Tensor co = empty({77, 45}, t);
    kernels::where[kCPU](co, cond.transpose(0, 1), a.transpose(0, 1), row.expand({45, 77}).transpose(0, 1));
    CHECK_MESSAGE(test::allclose(go.to(kCPU), co, 0, 0), fmt::format("where {}", t));
    Tensor ga = empty({1001}, dtype(t).device(kGpu)), ca = empty({1001}, t);
    kernels::arange[kGpu](ga, -3, 0.25);
    kernels::arange[kCPU](ca, -3, 0.25);
    CHECK_MESSAGE(test::allclose(ga.to(kCPU), ca, 0, 0), fmt::format("arange {}", t));
  }
}

TEST_CASE("gradient unscaling matches the CPU and flags inf/NaN") {
  KILN_REQUIRE_GPU();
  for (DType t : kFloats) {
    for (bool poison : {false, true}) {
      Tensor grad = random_input({1000, 3}, t);
      if (poison) grad.narrow(0, 517, 1).fill_(std::numeric_limits<double>::infinity());
      Tensor gg = grad.to(kGpu);
      Tensor fc = zeros({}, kFloat32), fg = zeros({}, dtype(kFloat32).device(kGpu));
      kernels::non_finite_check_and_unscale[kCPU](grad, fc, 1.0 / 1024);
      kernels::non_finite_check_and_unscale[kGpu](gg, fg, 1.0 / 1024);
      CHECK_MESSAGE(test::allclose(gg.to(kCPU), grad, 0, 0), fmt::format("unscale {}", t));
      CHECK(fg.to(kCPU).item<float>() == (poison ? 1.0f : 0.0f));
      CHECK(fc.item<float>() == fg.to(kCPU).item<float>());
    }
  }
}
