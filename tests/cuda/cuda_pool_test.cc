// CUDA max/avg pooling forward and backward against the CPU: strides, padding, ceil_mode,
// count_include_pad, overlapping windows, NaN, all floating dtypes. Skipped without a GPU.
#include <doctest/doctest.h>

#include <limits>

#include "core/kernels.h"
#include "core/ops.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

namespace {
const Device kGpu("cuda:0");

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t pad, bool ceil_mode) {
  const int64_t span = in + 2 * pad - k;
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + pad) --o;  // the last window must start inside
  return o;
}
}  // namespace

TEST_CASE("pooling forward and backward match the CPU") {
  KILN_REQUIRE_GPU();
  struct Geo {
    int64_t k, s, pad;
    bool ceil, include_pad;
  };
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    for (Geo geo : {Geo{2, 2, 0, false, true}, Geo{3, 2, 1, false, true}, Geo{3, 1, 1, false, false},
                    Geo{3, 2, 0, true, true}, Geo{2, 3, 1, true, false}}) {
      Pool2dParams p;
      p.kernel[0] = p.kernel[1] = geo.k;
      p.stride[0] = p.stride[1] = geo.s;
      p.padding[0] = p.padding[1] = geo.pad;
      p.ceil_mode = geo.ceil;
      p.count_include_pad = geo.include_pad;
      const int64_t H = 13, W = 11;
      const int64_t OH = out_size(H, geo.k, geo.s, geo.pad, geo.ceil), OW = out_size(W, geo.k, geo.s, geo.pad, geo.ceil);
      Tensor x = (rand({2, 3, H, W}, kFloat64) * 4 - 2).to(t);
      x.narrow(2, 5, 1).narrow(3, 4, 1).fill_(std::numeric_limits<double>::quiet_NaN());
      const std::string what = fmt::format("{} k{} s{} p{} ceil {} include_pad {}", t, geo.k, geo.s, geo.pad,
                                           geo.ceil, geo.include_pad);
      Tensor mo = empty({2, 3, OH, OW}, t), mi = empty({2, 3, OH, OW}, kInt64);
      kernels::max_pool2d[kCPU](mo, mi, x, p);
      Tensor gmo = empty({2, 3, OH, OW}, dtype(t).device(kGpu)), gmi = empty({2, 3, OH, OW}, dtype(kInt64).device(kGpu));
      kernels::max_pool2d[kGpu](gmo, gmi, x.to(kGpu), p);
      CHECK_MESSAGE(test::allclose(gmo.to(kCPU), mo, 0, 0), (std::string("max_pool2d ") + what));
      CHECK_MESSAGE(test::allclose(gmi.to(kCPU), mi, 0, 0), (std::string("max_pool2d indices ") + what));
      Tensor gout = (rand({2, 3, OH, OW}, kFloat64) - 0.5).to(t);
      Tensor mgx = empty(x.sizes(), t), gmgx = empty(x.sizes(), dtype(t).device(kGpu));
      kernels::max_pool2d_backward[kCPU](mgx, gout, mi);
      kernels::max_pool2d_backward[kGpu](gmgx, gout.to(kGpu), gmi);
      const double tol = test::tolerance(t) * 10;
      CHECK_MESSAGE(test::allclose(gmgx.to(kCPU), mgx, tol, tol), (std::string("max_pool2d_backward ") + what));
      Tensor xf = (rand({2, 3, H, W}, kFloat64) * 4 - 2).to(t);
      Tensor ao = empty({2, 3, OH, OW}, t), gao = empty({2, 3, OH, OW}, dtype(t).device(kGpu));
      kernels::avg_pool2d[kCPU](ao, xf, p);
      kernels::avg_pool2d[kGpu](gao, xf.to(kGpu), p);
      CHECK_MESSAGE(test::allclose(gao.to(kCPU), ao, tol, tol), (std::string("avg_pool2d ") + what));
      Tensor agx = empty(x.sizes(), t), gagx = empty(x.sizes(), dtype(t).device(kGpu));
      kernels::avg_pool2d_backward[kCPU](agx, gout, p);
      kernels::avg_pool2d_backward[kGpu](gagx, gout.to(kGpu), p);
      CHECK_MESSAGE(test::allclose(gagx.to(kCPU), agx, tol, tol), (std::string("avg_pool2d_backward ") + what));
    }
  }
}
