// The fused CUDA cross_entropy kernel (forward and backward) against the CPU kernel on random
// non-zero inputs: f32, f16, bf16 and f64, C from 3 to 50000 (warp and block rows), 1 to 1000
// rows, ignore_index and label smoothing; and the delayed report of an out-of-range target.
// Skipped without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernels.h"
#include "core/ops/cross_entropy.h"
#include "core/op_table.h"
#include "core/ops.h"
#include "cuda/device.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;
using test::close_scaled;
using test::random_input;

namespace {

const Device kGpu("cuda:0");

/// Targets in [0, C) with about a fifth set to ignore_index.
Tensor targets(int64_t N, int64_t C, int64_t ignore_index) {
  Tensor t = randint(0, C, {N});
  return where(rand({N}) < 0.2, full({N}, Scalar(ignore_index), kInt64), t);
}

}  // namespace

TEST_CASE("cross_entropy forward and backward match the CPU for warp and block rows") {
  KILN_REQUIRE_GPU();
  manual_seed(31);
  struct Case {
    int64_t N, C;
  };
  const std::vector<Case> cases = {{1, 3}, {1000, 3}, {37, 50}, {257, 1000}, {64, 1025}, {5, 50000}, {40, 50000}};
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    for (const Case& c : cases) {
      for (double s : {0.0, 0.1}) {
        const std::string what = fmt::format("{} N={} C={} smoothing={}", t, c.N, c.C, s);
        Tensor x = random_input({c.N, c.C}, t, -6, 6);
        Tensor target = targets(c.N, c.C, -100);
        Tensor lc = empty({c.N}, t), sc = empty({c.N}, t);
        kernels::cross_entropy[kCPU](lc, sc, x, target, -100, s);
        Tensor lg = empty({c.N}, dtype(t).device(kGpu)), sg = empty({c.N}, dtype(t).device(kGpu));
        const Tensor xg = x.to(kGpu), tg = target.to(kGpu);
        kernels::cross_entropy[kGpu](lg, sg, xg, tg, -100, s);
        const double tol = test::tolerance(t) * (t == kFloat64 ? 1 : 2);
        CHECK_MESSAGE(close_scaled(lg, lc, tol), "loss ", what);
        CHECK_MESSAGE(close_scaled(sg, sc, tol), "lse ", what);
        // Both backward kernels read the CPU's lse, so only the backward itself is compared.
        Tensor g = random_input({c.N}, t, 0.5, 1.5);
        Tensor gxc = empty({c.N, c.C}, t), gxg = empty({c.N, c.C}, dtype(t).device(kGpu));
        kernels::cross_entropy_backward[kCPU](gxc, g, x, sc, target, -100, s);
        kernels::cross_entropy_backward[kGpu](gxg, g.to(kGpu), xg, sc.to(kGpu), tg, -100, s);
        CHECK_MESSAGE(close_scaled(gxg, gxc, test::tolerance(t) * 10), "grad ", what);
      }
    }
  }
}

TEST_CASE("cross_entropy through the op table on CUDA, and an out-of-range target reported by the next call") {
  KILN_REQUIRE_GPU();
  manual_seed(32);
  Tensor x = random_input({16, 10}, kFloat32, -3, 3);
  Tensor target = targets(16, 10, 4);
  CHECK(test::allclose(op::cross_entropy(x.to(kGpu), target.to(kGpu), 4, 0.2).to(kCPU),
                       op::cross_entropy(x, target, 4, 0.2), 1e-5, 1e-5));
  Tensor bad = target.clone();
  bad.data_ptr<int64_t>()[3] = 10;
  Tensor loss = op::cross_entropy(x.to(kGpu), bad.to(kGpu), -100, 0.0);  // queued; does not throw here
  cuda::synchronize();
  CHECK(std::isnan(loss.to(kCPU).to_vector<double>()[3]));
  CHECK_THROWS_WITH(op::cross_entropy(x.to(kGpu), target.to(kGpu), -100, 0.0),
                    doctest::Contains("cross_entropy: target 10 (row 3) is out of range for 10 classes"));
  CHECK_NOTHROW(op::cross_entropy(x.to(kGpu), target.to(kGpu), -100, 0.0));  // reported once
}
