// bmm through cuBLAS against the CPU GEMM: f32/f64/f16/bf16, row- and column-major operands,
// a broadcast batch (stride 0), strided outputs, matmul/linear through the op table, linear
// through cuBLASLt (bias epilogue, views at 16..240-byte offsets, fallback on misaligned views)
// and the TF32 switch, expanded (stride 0) operands and linear's gradients through them.
// Skipped without a GPU.
#include <doctest/doctest.h>

#include <array>

#include "core/kernels.h"
#include "core/matmul_precision.h"
#include "core/op_table.h"
#include "core/ops.h"
#include "nn/functional.h"
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

TEST_CASE("bmm with expanded (stride 0) operands matches the CPU") {
  KILN_REQUIRE_GPU();
  // Each operand expanded from one value, one row and one column, on either side; M or N of 1.
  const int64_t M = 6, K = 5, N = 4;
  struct Case {
    std::string name;
    Tensor base;  // what the operand holds; expanded to `shape` on the CPU and on the GPU alike
    Shape shape;
  };
  for (DType t : {kFloat32, kFloat64}) {
    const std::vector<Case> lhs = {{"scalar", random_input({1, 1, 1}, t), {1, M, K}},
                                   {"row", random_input({1, 1, K}, t), {1, M, K}},
                                   {"col", random_input({1, M, 1}, t), {1, M, K}},
                                   {"M=1", random_input({1, 1, 1}, t), {1, 1, K}},
                                   {"dense", random_input({1, M, K}, t), {1, M, K}}};
    const std::vector<Case> rhs = {{"scalar", random_input({1, 1, 1}, t), {1, K, N}},
                                   {"row", random_input({1, 1, N}, t), {1, K, N}},
                                   {"col", random_input({1, K, 1}, t), {1, K, N}},
                                   {"N=1", random_input({1, 1, 1}, t), {1, K, 1}},
                                   {"dense", random_input({1, K, N}, t), {1, K, N}}};
    for (const Case& l : lhs) {
      for (const Case& r : rhs) {
        const int64_t m = l.shape[1], n = r.shape[2];
        Tensor go = empty({1, m, n}, dtype(t).device(kGpu)), co = empty({1, m, n}, t);
        kernels::bmm[kGpu](go, l.base.to(kGpu).expand(l.shape), r.base.to(kGpu).expand(r.shape));
        kernels::bmm[kCPU](co, l.base.expand(l.shape), r.base.expand(r.shape));
        const double tol = gemm_tolerance(t);
        CHECK_MESSAGE(test::allclose(go.to(kCPU), co, tol, tol), fmt::format("bmm {} {} @ {}", t, l.name, r.name));
      }
    }
  }
}

TEST_CASE("linear(x, w).sum().backward() with out_features == 1 or M == 1 gives the CPU's gradients") {
  KILN_REQUIRE_GPU();
  // sum's backward is g.expand(shape): the GEMMs of linear's backward get stride-0 operands.
  for (auto [M, K, N] : std::vector<std::array<int64_t, 3>>{{7, 5, 1}, {1, 5, 3}, {1, 5, 1}, {9, 6, 4}}) {
    Tensor x = random_input({M, K}, kFloat32), w = random_input({N, K}, kFloat32), b = random_input({N}, kFloat32);
    Tensor cx = x.clone().set_requires_grad(true), cw = w.clone().set_requires_grad(true);
    Tensor cb = b.clone().set_requires_grad(true);
    Tensor gx = x.to(kGpu).set_requires_grad(true), gw = w.to(kGpu).set_requires_grad(true);
    Tensor gb = b.to(kGpu).set_requires_grad(true);
    nn::functional::linear(cx, cw, cb).sum().backward();
    nn::functional::linear(gx, gw, gb).sum().backward();
    const std::string shape = fmt::format("M={} K={} N={}", M, K, N);
    CHECK_MESSAGE(test::allclose(gx.grad().to(kCPU), cx.grad(), 1e-4, 1e-4), (std::string("grad x ") + shape));
    CHECK_MESSAGE(test::allclose(gw.grad().to(kCPU), cw.grad(), 1e-4, 1e-4), (std::string("grad w ") + shape));
    CHECK_MESSAGE(test::allclose(gb.grad().to(kCPU), cb.grad(), 1e-4, 1e-4), (std::string("grad bias ") + shape));
  }
}

TEST_CASE("matmul and linear on CUDA tensors through the op table") {
  KILN_REQUIRE_GPU();
  Tensor x = random_input({50, 30}, kFloat32), w = random_input({20, 30}, kFloat32), bias = random_input({20}, kFloat32);
  CHECK(test::allclose(matmul(x.to(kGpu), w.to(kGpu).transpose(0, 1)).to(kCPU), matmul(x, w.transpose(0, 1)), 1e-4,
                       1e-4));
  CHECK(test::allclose(op::linear(x.to(kGpu), w.to(kGpu), bias.to(kGpu)).to(kCPU), op::linear(x, w, bias), 1e-4,
                       1e-4));
}

TEST_CASE("linear through cuBLASLt's bias epilogue matches the CPU, with and without bias") {
  KILN_REQUIRE_GPU();
  REQUIRE(kernels::linear.has(DeviceType::CUDA));
  // Odd shapes (K = 1, N = 1, sizes not multiples of 8) and aligned ones.
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1}, {7, 1, 13}, {37, 65, 29}, {256, 512, 128}, {3, 5, 1}};
  for (DType t : {kFloat32, kFloat16, kBFloat16, kFloat64}) {
    for (const auto& [M, K, N] : shapes) {
      Tensor x = random_input({M, K}, t), w = random_input({N, K}, t), b = random_input({N}, t);
      for (bool with_bias : {true, false}) {
        const Tensor bias = with_bias ? b : Tensor();
        Tensor go = empty({M, N}, dtype(t).device(kGpu)), co = empty({M, N}, t);
        kernels::linear[kGpu](go, x.to(kGpu), w.to(kGpu), with_bias ? bias.to(kGpu) : Tensor());
        Tensor co3 = co.view({1, M, N});
        kernels::bmm[kCPU](co3, x.view({1, M, K}), w.transpose(0, 1).unsqueeze(0));
        if (with_bias) co = (co.to(kFloat64) + bias.to(kFloat64)).to(t);
        const double tol = gemm_tolerance(t);
        CHECK_MESSAGE(test::allclose(go.to(kCPU).to(kFloat64), co.to(kFloat64), tol, tol),
                      fmt::format("linear {} M={} K={} N={} bias={}", t, M, K, N, with_bias));
      }
    }
  }
}

TEST_CASE("linear on misaligned views falls back to bmm + add and still matches") {
  KILN_REQUIRE_GPU();
  // A view starting one element in is 4-byte aligned only: cuBLASLt is not asked.
  Tensor xs = random_input({1 + 9 * 6}, kFloat32), w = random_input({5, 6}, kFloat32), b = random_input({5}, kFloat32);
  Tensor x = xs.slice(0, 1, 1 + 54).view({9, 6});
  Tensor gx = xs.to(kGpu).slice(0, 1, 1 + 54).view({9, 6});
  CHECK(test::allclose(op::linear(gx, w.to(kGpu), b.to(kGpu)).to(kCPU), op::linear(x, w, b), 1e-4, 1e-4));
}

TEST_CASE("linear through cuBLASLt on views at 16..240-byte offsets matches the CPU") {
  KILN_REQUIRE_GPU();
  // 16-byte aligned but not 256: the heuristic must be told, or it may pick a kernel that
  // assumes 256-byte alignment. Each offset applied to x, w and out in turn and to all three.
  const int64_t M = 64, K = 96, N = 80;
  for (DType t : {kFloat32, kFloat16, kBFloat16}) {
    const int64_t per16 = 16 / static_cast<int64_t>(element_size(t));
    Tensor x = random_input({M, K}, t), w = random_input({N, K}, t), b = random_input({N}, t);
    Tensor want = op::linear(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64));
    for (int64_t bytes = 16; bytes <= 240; bytes += 16) {
      const int64_t off = bytes / 16 * per16;
      for (int which = 0; which < 4; ++which) {
        auto at_offset = [&](const Tensor& src, bool shift) {
          const int64_t o = shift ? off : 0;
          Tensor buf = empty({o + src.numel()}, dtype(t).device(kGpu));
          Tensor v = buf.narrow(0, o, src.numel()).view(src.sizes());
          v.copy_(src.to(kGpu));
          return v;
        };
        Tensor gx = at_offset(x, which == 0 || which == 3), gw = at_offset(w, which == 1 || which == 3);
        Tensor gout = at_offset(zeros({M, N}, dtype(t)), which == 2 || which == 3);
        kernels::linear[kGpu](gout, gx, gw, b.to(kGpu));
        const double tol = gemm_tolerance(t);
        CHECK_MESSAGE(test::allclose(gout.to(kCPU).to(kFloat64), want, tol, tol),
                      fmt::format("linear {} at a {}-byte offset (operand {})", t, bytes, which));
      }
    }
  }
}

TEST_CASE("TF32 is used only when the f32 matmul precision is \"high\"") {
  KILN_REQUIRE_GPU();
  // Inputs with bits below TF32's 10-bit mantissa: full f32 keeps them, TF32 rounds them away.
  const int64_t n = 256;
  Tensor a = random_input({1, n, n}, kFloat32) + 1.0 / 4096, b = random_input({1, n, n}, kFloat32);
  Tensor exact = empty({1, n, n}, kFloat64);
  kernels::bmm[kCPU](exact, a.to(kFloat64), b.to(kFloat64));
  auto gpu_err = [&](bool linear) {
    Tensor out = empty({1, n, n}, dtype(kFloat32).device(kGpu));
    if (linear) {
      Tensor o2 = out.view({n, n});
      kernels::linear[kGpu](o2, a.view({n, n}).to(kGpu), b.view({n, n}).transpose(0, 1).contiguous().to(kGpu),
                            Tensor());
    } else {
      kernels::bmm[kGpu](out, a.to(kGpu), b.to(kGpu));
    }
    return (out.to(kCPU).to(kFloat64) - exact).abs().max().item<double>();
  };
  for (bool linear : {false, true}) {
    const double full = gpu_err(linear);
    set_float32_matmul_precision("high");
    const double tf32 = gpu_err(linear);
    set_float32_matmul_precision("highest");
    INFO("linear=", linear, " full f32 error ", full, ", TF32 error ", tf32);
    CHECK(full < 1e-3);
    CHECK(tf32 < 0.5);     // TF32 is still a good GEMM ...
    CHECK(tf32 > 4 * full);  // ... but visibly coarser than f32
  }
}
