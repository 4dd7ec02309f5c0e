// conv2d forward and backward through cuDNN against the CPU: stride, padding, dilation,
// groups, with and without bias, f32/f64/f16/bf16, and the math type (exact f32 unless TF32 is
// allowed). Skipped without a GPU.
#include <doctest/doctest.h>

#include "core/kernels.h"
#include "core/matmul_precision.h"
#include "core/ops.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

namespace {
const Device kGpu("cuda:0");
Tensor random_input(const Shape& shape, DType t) { return (rand(shape, kFloat64) * 2 - 1).to(t); }
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) { return (in + 2 * p - d * (k - 1) - 1) / s + 1; }
}  // namespace

TEST_CASE("conv2d and its backward match the CPU") {
  KILN_REQUIRE_GPU();
  struct Geo {
    int64_t cin, cout, k, stride, pad, dil, groups;
    bool bias;
  };
  for (DType t : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    for (Geo geo : {Geo{3, 8, 3, 1, 1, 1, 1, true}, Geo{4, 6, 5, 2, 2, 1, 2, false}, Geo{6, 6, 3, 1, 2, 2, 6, true},
                    Geo{1, 4, 1, 1, 0, 1, 1, true}}) {
      Conv2dParams p;
      p.stride[0] = p.stride[1] = geo.stride;
      p.padding[0] = p.padding[1] = geo.pad;
      p.dilation[0] = p.dilation[1] = geo.dil;
      p.groups = geo.groups;
      const int64_t H = 12, W = 10;
      const int64_t OH = out_size(H, geo.k, geo.stride, geo.pad, geo.dil), OW = out_size(W, geo.k, geo.stride, geo.pad, geo.dil);
      Tensor x = random_input({2, geo.cin, H, W}, t), w = random_input({geo.cout, geo.cin / geo.groups, geo.k, geo.k}, t);
      Tensor b = geo.bias ? random_input({geo.cout}, t) : Tensor();
      const std::string what = fmt::format("{} cin {} cout {} k {} s {} p {} d {} g {}", t, geo.cin, geo.cout, geo.k,
                                           geo.stride, geo.pad, geo.dil, geo.groups);
      Tensor co = empty({2, geo.cout, OH, OW}, t), go = empty({2, geo.cout, OH, OW}, dtype(t).device(kGpu));
      kernels::conv2d[kCPU](co, x, w, b, p);
      kernels::conv2d[kGpu](go, x.to(kGpu), w.to(kGpu), b.defined() ? b.to(kGpu) : Tensor(), p);
      const double tol = t == kFloat64 ? 1e-10 : t == kFloat32 ? 1e-4 : 3e-2;
      CHECK_MESSAGE(test::allclose(go.to(kCPU), co, tol, tol), (std::string("conv2d ") + what));
      Tensor gy = random_input({2, geo.cout, OH, OW}, t);
      Tensor cgx = empty(x.sizes(), t), cgw = empty(w.sizes(), t), cgb = geo.bias ? empty({geo.cout}, t) : Tensor();
      kernels::conv2d_backward[kCPU](cgx, cgw, cgb, gy, x, w, p);
      Tensor ggx = empty(x.sizes(), dtype(t).device(kGpu)), ggw = empty(w.sizes(), dtype(t).device(kGpu));
      Tensor ggb = geo.bias ? empty({geo.cout}, dtype(t).device(kGpu)) : Tensor();
      kernels::conv2d_backward[kGpu](ggx, ggw, ggb, gy.to(kGpu), x.to(kGpu), w.to(kGpu), p);
      CHECK_MESSAGE(test::allclose(ggx.to(kCPU), cgx, tol, tol), (std::string("conv2d grad_x ") + what));
      CHECK_MESSAGE(test::allclose(ggw.to(kCPU), cgw, tol * 5, tol * 5), (std::string("conv2d grad_w ") + what));
      if (geo.bias) CHECK_MESSAGE(test::allclose(ggb.to(kCPU), cgb, tol * 5, tol * 5), (std::string("conv2d grad_b ") + what));
    }
  }
}

TEST_CASE("conv2d runs the chosen algorithm's math: exact f32 by default, TF32 only when allowed") {
  KILN_REQUIRE_GPU();
  // A tensor-core-sized problem with bits below TF32's 10-bit mantissa: the algorithm's math type
  // set on the descriptor decides whether they survive.
  Conv2dParams p;
  p.padding[0] = p.padding[1] = 1;
  Tensor x = random_input({8, 64, 16, 16}, kFloat32) + 1.0 / 4096, w = random_input({64, 64, 3, 3}, kFloat32);
  Tensor exact = empty({8, 64, 16, 16}, kFloat64);
  kernels::conv2d[kCPU](exact, x.to(kFloat64), w.to(kFloat64), Tensor(), p);
  auto gpu_err = [&] {
    Tensor go = empty({8, 64, 16, 16}, dtype(kFloat32).device(kGpu));
    kernels::conv2d[kGpu](go, x.to(kGpu), w.to(kGpu), Tensor(), p);
    return (go.to(kCPU).to(kFloat64) - exact).abs().max().item<double>();
  };
  const double full = gpu_err();
  set_float32_matmul_precision("high");
  const double tf32 = gpu_err();
  set_float32_matmul_precision("highest");
  INFO("full f32 error ", full, ", TF32 error ", tf32);
  CHECK(full < 1e-3);  // TF32 would err by ~1e-2 here
  CHECK(tf32 < 0.5);   // allowed, not forced: cuDNN may still pick an FMA algorithm
}
