// CUDA reductions (sum, mean, max, min, prod over inner, outer, several and all dims, long rows
// split into chunks) and softmax/log_softmax forward and backward against the CPU kernels on
// random non-zero inputs. Skipped without a GPU.
#include <doctest/doctest.h>

#include <vector>

#include "core/kernels.h"
#include "core/ops.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

namespace {

const Device kGpu("cuda:0");

Tensor random_input(const Shape& shape, DType dtype, double lo, double hi) {
  Tensor u = rand(shape, kFloat64) * (hi - lo) + lo;
  if (!is_floating(dtype)) u = (u * 4).clamp(-9, 9);
  return u.to(dtype);
}

Shape reduced_shape(const Shape& s, const IntList& dims) {
  Shape r = s;
  for (int64_t d : dims) r[d < 0 ? d + s.size() : d] = 1;
  return r;
}

}  // namespace

TEST_CASE("reductions match the CPU over inner, outer, several and all dims") {
  KILN_REQUIRE_GPU();
  struct Case {
    Shape shape;
    IntList dims;
  };
  const std::vector<Case> cases = {
      {{37, 129}, {1}},        {{37, 129}, {0}},       {{6, 7, 33}, {0, 2}}, {{6, 7, 33}, {0, 1, 2}},
      {{3, 300000}, {1}},      {{1 << 21}, {0}},       {{5, 1, 9}, {1}},
      // Leading or middle dims of a contiguous input: reduced down the columns (one chunk, and
      // several whose partials a second pass folds).
      {{3, 5000, 40}, {1}},    {{4096, 300}, {0}},     {{2, 3, 64, 50}, {0, 1}}, {{33, 40}, {0}},
  };
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64}) {
    for (ReduceKind k : {ReduceKind::sum, ReduceKind::mean, ReduceKind::max, ReduceKind::min, ReduceKind::prod}) {
      if (k == ReduceKind::mean && !is_floating(t)) continue;
      for (const Case& c : cases) {
        if (k == ReduceKind::prod && c.shape.size() == 1) continue;  // products of 2M values over/underflow
        // Products stay finite with values near 1; sums of half values stay in range.
        Tensor x = k == ReduceKind::prod ? random_input(c.shape, t, 0.95, 1.05) : random_input(c.shape, t, -2, 2);
        if (k == ReduceKind::prod && !is_floating(t)) x = random_input(c.shape, t, 0.26, 0.3);  // all 1s: exact
        const DType od = is_floating(t) ? t : kInt64;
        Tensor go = empty(reduced_shape(c.shape, c.dims), dtype(od).device(kGpu));
        kernels::reduce[kGpu](k, go, x.to(kGpu), c.dims);
        Tensor co = empty(reduced_shape(c.shape, c.dims), od);
        kernels::reduce[kCPU](k, co, x, c.dims);
        // Long f32 rows: both accumulate in double; 16-bit results round once at the end.
        const double tol = t == kFloat16 || t == kBFloat16 ? 2e-2 : t == kFloat32 ? 1e-5 : 1e-10;
        CHECK_MESSAGE(test::allclose(go.to(kCPU), co, tol, tol * 10),
                      fmt::format("{} {} over {} of {}", kind_name(k), t, c.dims, c.shape));
      }
    }
  }
}

TEST_CASE("reductions of a transposed input and into a strided output") {
  KILN_REQUIRE_GPU();
  Tensor x = random_input({40, 50}, kFloat32, -1, 1);
  Tensor xt = x.to(kGpu).transpose(0, 1);  // [50, 40], strided
  Tensor go = empty({50, 1}, dtype(kFloat32).device(kGpu));
  kernels::reduce[kGpu](ReduceKind::sum, go, xt, {1});
  Tensor co = empty({50, 1}, kFloat32);
  kernels::reduce[kCPU](ReduceKind::sum, co, x.transpose(0, 1), {1});
  CHECK(test::allclose(go.to(kCPU), co, 1e-5, 1e-5));
  Tensor wide = empty({50, 2}, dtype(kFloat32).device(kGpu));
  Tensor col = wide.slice(1, 0, 1);  // stride 2
  kernels::reduce[kGpu](ReduceKind::max, col, xt, {1});
  kernels::reduce[kCPU](ReduceKind::max, co, x.transpose(0, 1), {1});
  CHECK(test::allclose(col.to(kCPU), co, 0, 0));
}

TEST_CASE("sum, mean and amax through the op table") {
  KILN_REQUIRE_GPU();
  Tensor x = random_input({64, 33}, kFloat32, -2, 2);
  Tensor g = x.to(kGpu);
  CHECK(test::allclose(g.sum().to(kCPU), x.sum(), 1e-5, 1e-5));
  CHECK(test::allclose(g.mean({0}, false).to(kCPU), x.mean({0}, false), 1e-5, 1e-5));
  CHECK(test::allclose(g.amax({1}, true).to(kCPU), x.amax({1}, true), 0, 0));
}

TEST_CASE("softmax and log_softmax forward and backward match the CPU along any dim") {
  KILN_REQUIRE_GPU();
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    for (bool log : {false, true}) {
      for (int64_t dim : {2, 0, 1}) {  // the slot takes wrapped dims (core/ops wraps -1)
        Tensor x = random_input({7, 300, 5}, t, -4, 4);
        Tensor gy = random_input({7, 300, 5}, t, -1, 1);
        Tensor yg = empty(x.sizes(), dtype(t).device(kGpu));
        kernels::softmax[kGpu](yg, x.to(kGpu), dim, log);
        Tensor yc = empty(x.sizes(), t);
        kernels::softmax[kCPU](yc, x, dim, log);
        const double tol = test::tolerance(t) * 10;
        CHECK_MESSAGE(test::allclose(yg.to(kCPU), yc, tol, tol),
                      fmt::format("{}softmax {} dim {}", log ? "log_" : "", t, dim));
        Tensor gxg = empty(x.sizes(), dtype(t).device(kGpu));
        kernels::softmax_backward[kGpu](gxg, gy.to(kGpu), yc.to(kGpu), dim, log);
        Tensor gxc = empty(x.sizes(), t);
        kernels::softmax_backward[kCPU](gxc, gy, yc, dim, log);
        CHECK_MESSAGE(test::allclose(gxg.to(kCPU), gxc, tol, tol),
                      fmt::format("{}softmax backward {} dim {}", log ? "log_" : "", t, dim));
      }
    }
  }
}

TEST_CASE("argmax and argmin match the CPU, first index on ties") {
  KILN_REQUIRE_GPU();
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64}) {
    // Few distinct values, so ties are common and the first index must win.
    Tensor x = random_input({33, 1000}, kFloat64, -4, 4).to(kInt64).to(t);
    for (ReduceKind k : {ReduceKind::max, ReduceKind::min}) {
      for (int64_t dim : {0, 1}) {
        Shape os = x.sizes();
        os[dim] = 1;
        Tensor go = empty(os, dtype(kInt64).device(kGpu));
        kernels::arg_reduce[kGpu](k, go, x.to(kGpu), dim);
        Tensor co = empty(os, kInt64);
        kernels::arg_reduce[kCPU](k, co, x, dim);
        CHECK_MESSAGE(test::allclose(go.to(kCPU), co, 0, 0), fmt::format("arg{} {} dim {}", kind_name(k), t, dim));
      }
    }
  }
}
