// The CUDA elementwise kernels that are not ops of the op database (fill, host <-> device copies,
// casts between every pair of dtypes, where/arange in every dtype, gradient unscaling) against
// the CPU kernels on random non-zero inputs. The unary, binary and comparison kernels are checked
// from the database's rows (tests/testing/op_db_test.cc: every dtype, layout and gradient).
// Skipped without a GPU.
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

TEST_CASE("where and arange kernels match the CPU in every dtype") {
  KILN_REQUIRE_GPU();
  for (DType t : kAll) {
    Tensor a = random_input({45, 77}, t), row = random_input({1, 77}, t);
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
