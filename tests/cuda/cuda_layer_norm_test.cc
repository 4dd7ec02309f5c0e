// The fused CUDA layer_norm kernel (forward and backward) against the CPU kernel on random
// non-zero inputs: f32, f16, bf16 and f64, with and without weight and bias, over one and two
// normalised dims. Skipped without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernels.h"
#include "core/ops/layer_norm.h"
#include "core/op_table.h"
#include "core/ops.h"
#include "cuda/device.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;
using test::close_scaled;
using test::random_input;

namespace {

const Device kGpu("cuda:0");

}  // namespace

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
