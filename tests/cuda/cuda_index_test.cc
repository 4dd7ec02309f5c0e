// CUDA index_select, gather, index_add and scatter_add against the CPU, with repeated indices
// (the adds are atomic on the GPU), every dim, strided inputs and all numeric dtypes.
// Skipped without a GPU.
#include <doctest/doctest.h>

#include "core/ops.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

namespace {
const Device kGpu("cuda:0");

Tensor random_input(const Shape& shape, DType t) {
  Tensor u = rand(shape, kFloat64) * 8 - 4;
  return (is_floating(t) ? u : u.to(kInt64)).to(t);
}
}  // namespace

TEST_CASE("index_select and index_add match the CPU along every dim") {
  KILN_REQUIRE_GPU();
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64}) {
    Tensor x = random_input({6, 7, 8}, t);
    for (int64_t dim = 0; dim < 3; ++dim) {
      Tensor index = randint(0, x.size(dim), {11});  // repeats are likely
      Tensor g = x.to(kGpu).index_select(dim, index.to(kGpu));
      CHECK_MESSAGE(test::allclose(g.to(kCPU), x.index_select(dim, index), 0, 0),
                    fmt::format("index_select {} dim {}", t, dim));
      Shape ss = x.sizes();
      ss[dim] = 11;
      Tensor src = random_input(ss, t);
      Tensor ga = index_add(x.to(kGpu), dim, index.to(kGpu), src.to(kGpu));
      const double tol = t == kFloat16 || t == kBFloat16 ? 2e-2 : 1e-6;
      CHECK_MESSAGE(test::allclose(ga.to(kCPU), index_add(x, dim, index, src), tol, tol),
                    fmt::format("index_add {} dim {}", t, dim));
    }
  }
}

TEST_CASE("gather and scatter_add match the CPU, transposed inputs included") {
  KILN_REQUIRE_GPU();
  for (DType t : {kFloat32, kFloat16, kFloat64, kInt64}) {
    Tensor x = random_input({9, 10}, t);
    for (int64_t dim = 0; dim < 2; ++dim) {
      Tensor index = randint(0, x.size(dim), {9, 10});
      Tensor g = gather(x.to(kGpu), dim, index.to(kGpu));
      CHECK_MESSAGE(test::allclose(g.to(kCPU), gather(x, dim, index), 0, 0), fmt::format("gather {} dim {}", t, dim));
      Tensor xt = x.transpose(0, 1);  // [10, 9], strided on both devices
      Tensor it = randint(0, xt.size(dim), {4, 9});
      Tensor gt = gather(x.to(kGpu).transpose(0, 1), dim, it.to(kGpu));
      CHECK_MESSAGE(test::allclose(gt.to(kCPU), gather(xt, dim, it), 0, 0),
                    fmt::format("gather transposed {} dim {}", t, dim));
      Tensor src = random_input({9, 10}, t);
      Tensor s = scatter_add(x.to(kGpu), dim, index.to(kGpu), src.to(kGpu));
      const double tol = t == kFloat16 ? 2e-2 : 1e-6;
      CHECK_MESSAGE(test::allclose(s.to(kCPU), scatter_add(x, dim, index, src), tol, tol),
                    fmt::format("scatter_add {} dim {}", t, dim));
    }
  }
}
