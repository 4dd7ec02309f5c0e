// CUDA random fills against the CPU's for the same seed: uniform, randint and bernoulli are
// bit-identical (same Philox counters, same mapping), normal agrees to float rounding; the
// generator advances by the same count on both devices. Skipped without a GPU.
#include <doctest/doctest.h>

#include "core/kernels.h"
#include "core/ops.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

namespace {
const Device kGpu("cuda:0");

/// Runs `fill` on a CPU and a GPU tensor from generators seeded alike; returns both (on the CPU).
template <class F> std::pair<Tensor, Tensor> both(const Shape& shape, DType t, F&& fill) {
  Generator gc(1234), gg(1234);
  gc.reserve(17);  // a non-zero starting offset
  gg.reserve(17);
  Tensor c = empty(shape, t), g = empty(shape, dtype(t).device(kGpu));
  fill(c, gc);
  fill(g, gg);
  CHECK(gc.state().offset == gg.state().offset);
  return {c, g.to(kCPU)};
}
}  // namespace

TEST_CASE("uniform, randint and bernoulli are bit-identical to the CPU for a seed") {
  KILN_REQUIRE_GPU();
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    auto [c, g] = both({1000, 37}, t, [](Tensor& o, Generator& gen) { kernels::uniform[o.device()](o, gen, -2, 3); });
    CHECK_MESSAGE(test::allclose(g, c, 0, 0), fmt::format("uniform {}", t));
  }
  for (DType t : {kInt32, kInt64, kFloat32}) {
    auto [c, g] = both({5001}, t, [](Tensor& o, Generator& gen) { kernels::randint[o.device()](o, gen, -50, 1000); });
    CHECK_MESSAGE(test::allclose(g, c, 0, 0), fmt::format("randint {}", t));
  }
  for (DType t : {kBool, kFloat32, kInt64}) {
    auto [c, g] = both({4097}, t, [](Tensor& o, Generator& gen) { kernels::bernoulli[o.device()](o, gen, 0.3); });
    CHECK_MESSAGE(test::allclose(g.to(kInt64), c.to(kInt64), 0, 0), fmt::format("bernoulli {}", t));
  }
}

TEST_CASE("normal agrees with the CPU to rounding") {
  KILN_REQUIRE_GPU();
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    auto [c, g] = both({333, 31}, t, [](Tensor& o, Generator& gen) { kernels::normal[o.device()](o, gen, 0.5, 2); });
    const double tol = t == kFloat64 ? 1e-12 : t == kFloat32 ? 1e-5 : 1e-2;
    CHECK_MESSAGE(test::allclose(g, c, tol, tol), fmt::format("normal {}", t));
  }
}

TEST_CASE("randn on a CUDA device through the op table") {
  KILN_REQUIRE_GPU();
  manual_seed(7);
  Tensor c = randn({64, 64});
  manual_seed(7);
  Tensor g = randn({64, 64}, device(kGpu));
  CHECK(test::allclose(g.to(kCPU), c, 1e-5, 1e-5));
}
