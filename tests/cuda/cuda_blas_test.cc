// bmm through cuBLAS against the CPU GEMM: f32/f64/f16/bf16, row- and column-major operands,
// a broadcast batch (stride 0), strided outputs, and matmul/linear through the op table.
// Skipped without a GPU.
#include <doctest/doctest.h>

#include "core/kernels.h"
#include "core/op_table.h"
#include "core/ops.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

namespace {
const Device kGpu("cuda:0");

Tensor random_input(const Shape& shape, DType t) { return (rand(shape, kFloat64) * 2 - 1).to(t); }

double gemm_tolerance(DType t) { return t == kFloat64 ? 1e-10 : t == kFloat32 ? 1e-4 : 3e-2; }
}  // namespace

TEST_CASE("bmm matches the CPU for row- and column-major operands") {
  KILN_REQUIRE_GPU();
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    Tensor a = random_input({3, 37, 65}, t), b = random_input({3, 65, 29}, t);
    Tensor at = random_input({3, 65, 37}, t).transpose(1, 2), bt = random_input({3, 29, 65}, t).transpose(1, 2);
    for (auto [name, x, y] : std::vector<std::tuple<std::string, Tensor, Tensor>>{
             {"NN", a, b}, {"TN", at, b}, {"NT", a, bt}, {"TT", at, bt}}) {
      Tensor go = empty({3, 37, 29}, dtype(t).device(kGpu));
      Tensor gx = x.to(kGpu), gy = y.to(kGpu);
      // Keep the device operands' layout: to() of a transposed view gives a contiguous copy.
      if (name[0] == 'T') gx = x.transpose(1, 2).contiguous().to(kGpu).transpose(1, 2);
      if (name[1] == 'T') gy = y.transpose(1, 2).contiguous().to(kGpu).transpose(1, 2);
      kernels::bmm[kGpu](go, gx, gy);
      Tensor co = empty({3, 37, 29}, t);
      kernels::bmm[kCPU](co, x, y);
      const double tol = gemm_tolerance(t);
      CHECK_MESSAGE(test::allclose(go.to(kCPU), co, tol, tol), fmt::format("bmm {} {}", t, name));
    }
  }
}

TEST_CASE("bmm with a broadcast batch operand and into a strided output") {
  KILN_REQUIRE_GPU();
  Tensor a = random_input({4, 8, 16}, kFloat32), w = random_input({1, 16, 12}, kFloat32);
  Tensor go = empty({4, 12, 8}, dtype(kFloat32).device(kGpu)).transpose(1, 2);  // strided [4, 8, 12]
  kernels::bmm[kGpu](go, a.to(kGpu), w.to(kGpu).expand({4, 16, 12}));
  Tensor co = empty({4, 8, 12}, kFloat32);
  kernels::bmm[kCPU](co, a, w.expand({4, 16, 12}));
  CHECK(test::allclose(go.to(kCPU), co, 1e-4, 1e-4));
}

TEST_CASE("matmul and linear on CUDA tensors through the op table") {
  KILN_REQUIRE_GPU();
  Tensor x = random_input({50, 30}, kFloat32), w = random_input({20, 30}, kFloat32), bias = random_input({20}, kFloat32);
  CHECK(test::allclose(matmul(x.to(kGpu), w.to(kGpu).transpose(0, 1)).to(kCPU), matmul(x, w.transpose(0, 1)), 1e-4,
                       1e-4));
  CHECK(test::allclose(op::linear(x.to(kGpu), w.to(kGpu), bias.to(kGpu)).to(kCPU), op::linear(x, w, bias), 1e-4,
                       1e-4));
}
