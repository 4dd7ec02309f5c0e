// The fused CUDA cross_entropy and layer_norm kernels (forward and backward) against the CPU
// kernels on random non-zero inputs: f32, f16, bf16 and f64, C from 3 to 50000 (warp and block
// rows), 1 to 1000 rows, ignore_index and label smoothing, with and without weight and bias; and
// the delayed report of an out-of-range target. Skipped without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernels.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/layer_norm.h"
#include "core/op_table.h"
#include "core/ops.h"
#include "cuda/device.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

namespace {

const Device kGpu("cuda:0");

Tensor random_input(const Shape& shape, DType dtype, double lo, double hi) {
  return (rand(shape, kFloat64) * (hi - lo) + lo).to(dtype);
}

/// Elementwise: |a - b| <= tol (|b| + scale), scale the largest |b| (at least 1): sums over many
/// terms differ in order between the devices, so small entries are held to the big ones' error.
bool close_scaled(const Tensor& a, const Tensor& b, double tol) {
  auto x = a.to(kCPU).to_vector<double>(), y = b.to_vector<double>();
  if (x.size() != y.size()) return false;
  double scale = 1;
  for (double v : y) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || std::fabs(x[i] - y[i]) <= tol * (std::fabs(y[i]) + scale))) return false;
  return true;
}

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

TEST_CASE("layer_norm forward and backward match the CPU, with and without weight and bias") {
  KILN_REQUIRE_GPU();
  manual_seed(33);
  struct Case {
    int64_t M, N;
  };
  const std::vector<Case> cases = {{1, 3}, {1000, 5}, {37, 64}, {300, 1024}, {64, 1025}, {3, 50000}, {1000, 768}};
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    const DType sd = layer_norm_stats_dtype(t);
    for (const Case& c : cases) {
      for (int affine = 0; affine < 3; ++affine) {
        const std::string what = fmt::format("{} M={} N={} affine={}", t, c.M, c.N, affine);
        Tensor x = random_input({c.M, c.N}, t, -2, 3);
        Tensor w = affine >= 1 ? random_input({c.N}, t, 0.5, 1.5) : Tensor();
        Tensor b = affine >= 2 ? random_input({c.N}, t, -1, 1) : Tensor();
        const Tensor xg = x.to(kGpu), wg = w.defined() ? w.to(kGpu) : w, bg = b.defined() ? b.to(kGpu) : b;
        Tensor yc = empty({c.M, c.N}, t), mc = empty({c.M}, sd), rc = empty({c.M}, sd);
        kernels::layer_norm[kCPU](yc, mc, rc, x, w, b, 1e-5);
        Tensor yg = empty({c.M, c.N}, dtype(t).device(kGpu)), mg = empty({c.M}, dtype(sd).device(kGpu)),
               rg = empty({c.M}, dtype(sd).device(kGpu));
        kernels::layer_norm[kGpu](yg, mg, rg, xg, wg, bg, 1e-5);
        const double tol = test::tolerance(t) * (t == kFloat64 ? 1 : 2);
        CHECK_MESSAGE(close_scaled(yg, yc, tol), "out ", what);
        CHECK_MESSAGE(close_scaled(mg, mc, tol), "mean ", what);
        CHECK_MESSAGE(close_scaled(rg, rc, tol), "rstd ", what);
        // Both backward kernels read the CPU's statistics.
        Tensor gy = random_input({c.M, c.N}, t, -1, 1);
        Tensor gxc = empty({c.M, c.N}, t), gwc = empty({c.N}, t), gbc = empty({c.N}, t);
        kernels::layer_norm_backward[kCPU](gxc, gwc, gbc, gy, x, mc, rc, w);
        Tensor gxg = empty({c.M, c.N}, dtype(t).device(kGpu)), gwg = empty({c.N}, dtype(t).device(kGpu)),
               gbg = empty({c.N}, dtype(t).device(kGpu));
        kernels::layer_norm_backward[kGpu](gxg, gwg, gbg, gy.to(kGpu), xg, mc.to(kGpu), rc.to(kGpu), wg);
        const double gtol = test::tolerance(t) * 10;
        CHECK_MESSAGE(close_scaled(gxg, gxc, gtol), "grad_x ", what);
        CHECK_MESSAGE(close_scaled(gwg, gwc, gtol), "grad_weight ", what);
        CHECK_MESSAGE(close_scaled(gbg, gbc, gtol), "grad_bias ", what);
      }
    }
  }
}

TEST_CASE("layer_norm over two dims through the op table on CUDA, and grad_x alone") {
  KILN_REQUIRE_GPU();
  manual_seed(34);
  Tensor x = random_input({4, 6, 7}, kFloat32, -2, 2), w = random_input({6, 7}, kFloat32, 0.5, 1.5);
  CHECK(test::allclose(op::layer_norm(x.to(kGpu), w.to(kGpu), Tensor(), 2, 1e-5).to(kCPU),
                       op::layer_norm(x, w, Tensor(), 2, 1e-5), 1e-5, 1e-5));
  Tensor x2 = x.reshape({4, 42});
  Tensor mc = empty({4}), rc = empty({4}), yc = empty({4, 42});
  kernels::layer_norm[kCPU](yc, mc, rc, x2, Tensor(), Tensor(), 1e-5);
  Tensor gy = random_input({4, 42}, kFloat32, -1, 1);
  Tensor none, gxc = empty({4, 42}), gxg = empty({4, 42}, dtype(kFloat32).device(kGpu));
  Tensor none_w, none_b;
  kernels::layer_norm_backward[kCPU](gxc, none, none_b, gy, x2, mc, rc, Tensor());
  kernels::layer_norm_backward[kGpu](gxg, none_w, none_b, gy.to(kGpu), x2.to(kGpu), mc.to(kGpu), rc.to(kGpu),
                                     Tensor());
  CHECK(close_scaled(gxg, gxc, 1e-4));
}
