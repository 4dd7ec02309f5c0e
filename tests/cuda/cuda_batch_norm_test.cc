// Training-mode batch norm through cuDNN against the CPU kernels: forward output, saved
// statistics, running statistics and all three gradients, for 2-D to 5-D inputs, with and
// without weight/bias/running stats, f32/f64 and f16/bf16 x with f32 parameters; then the op
// with autograd on the GPU. Skipped without a GPU.
#include <doctest/doctest.h>

#include <string>

#include "core/kernels.h"
#include "core/op_table.h"
#include "core/ops.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

namespace {

const Device kGpu("cuda:0");

Tensor random_input(const Shape& shape, DType t, double scale = 2.0, double shift = 0.0) {
  return (rand(shape, kFloat64) * scale - scale / 2 + shift).to(t);
}
Tensor gpu(const Tensor& t) { return t.defined() ? t.to(kGpu) : Tensor(); }
Tensor gpu_empty(const Shape& s, DType t) { return empty(s, dtype(t).device(kGpu)); }

/// Kernel outputs are held to the dtype's tolerance; f32 loosened for cuDNN's different
/// reduction order, and the 16-bit types' parameter gradients (sums over the batch) twice theirs.
double tol_for(DType t) { return t == kFloat32 ? 1e-4 : t == kFloat64 ? 1e-10 : test::tolerance(t) * 2; }

}  // namespace

TEST_CASE("batch_norm forward, running stats and backward match the CPU") {
  KILN_REQUIRE_GPU();
  struct Case {
    DType x, p;
  };
  for (Case dc : {Case{kFloat32, kFloat32}, Case{kFloat64, kFloat64}, Case{kFloat16, kFloat32},
                  Case{kBFloat16, kFloat32}}) {
    for (const Shape& shape : {Shape{16, 5}, Shape{4, 3, 9}, Shape{3, 4, 5, 6}, Shape{2, 3, 3, 4, 5}}) {
      for (bool affine : {true, false}) {
        for (bool track : {true, false}) {
          const std::string what = fmt::format("x {} params {} shape {} affine {} track {}", dc.x, dc.p,
                                               shape_str(shape), affine, track);
          CAPTURE(what);
          const int64_t c = shape[1];
          const DType sd = dc.x == kFloat64 ? kFloat64 : kFloat32;
          const double tol = tol_for(dc.x), stat_tol = dc.x == kFloat64 ? 1e-10 : 1e-4;
          Tensor x = random_input(shape, dc.x, 3.0, 0.7);
          Tensor w = affine ? random_input({c}, dc.p, 1.0, 1.0) : Tensor();
          Tensor b = affine ? random_input({c}, dc.p) : Tensor();
          Tensor crm = track ? random_input({c}, dc.p) : Tensor(), crv = track ? random_input({c}, dc.p, 1.0, 1.5) : Tensor();
          Tensor grm = gpu(crm), grv = gpu(crv);
          Tensor cout_ = empty(shape, dc.x), cm = empty({c}, sd), ci = empty({c}, sd);
          Tensor gout = gpu_empty(shape, dc.x), gm = gpu_empty({c}, sd), gi = gpu_empty({c}, sd);
          kernels::batch_norm[kCPU](cout_, cm, ci, x, w, b, crm, crv, 0.1, 1e-5);
          kernels::batch_norm[kGpu](gout, gm, gi, gpu(x), gpu(w), gpu(b), grm, grv, 0.1, 1e-5);
          CHECK_MESSAGE(test::allclose(gout.to(kCPU), cout_, tol, tol), ("out " + what));
          CHECK_MESSAGE(test::allclose(gm.to(kCPU), cm, stat_tol, stat_tol), ("save_mean " + what));
          CHECK_MESSAGE(test::allclose(gi.to(kCPU), ci, stat_tol, stat_tol), ("save_invstd " + what));
          if (track) {
            CHECK_MESSAGE(test::allclose(grm.to(kCPU), crm, stat_tol, stat_tol), ("running_mean " + what));
            CHECK_MESSAGE(test::allclose(grv.to(kCPU), crv, stat_tol, stat_tol), ("running_var (unbiased) " + what));
          }
          // Backward from the CPU's saved statistics on both sides, so only the kernels differ.
          Tensor gy = random_input(shape, dc.x);
          Tensor cgx = empty(shape, dc.x), cgw = empty({c}, dc.p), cgb = empty({c}, dc.p);
          kernels::batch_norm_backward[kCPU](cgx, cgw, cgb, gy, x, w, cm, ci);
          Tensor ggx = gpu_empty(shape, dc.x), ggw = gpu_empty({c}, dc.p), ggb = gpu_empty({c}, dc.p);
          kernels::batch_norm_backward[kGpu](ggx, ggw, ggb, gpu(gy), gpu(x), gpu(w), gpu(cm), gpu(ci));
          CHECK_MESSAGE(test::allclose(ggx.to(kCPU), cgx, tol, tol), ("grad_x " + what));
          CHECK_MESSAGE(test::allclose(ggw.to(kCPU), cgw, tol * 5, tol * 5), ("grad_weight " + what));
          CHECK_MESSAGE(test::allclose(ggb.to(kCPU), cgb, tol * 5, tol * 5), ("grad_bias " + what));
          // Only some gradients asked for: the others are left undefined.
          Tensor gx_only = gpu_empty(shape, dc.x), none;
          kernels::batch_norm_backward[kGpu](gx_only, none, none, gpu(gy), gpu(x), gpu(w), gpu(cm), gpu(ci));
          CHECK_MESSAGE(test::allclose(gx_only.to(kCPU), cgx, tol, tol), ("grad_x alone " + what));
        }
      }
    }
  }
}

TEST_CASE("op::batch_norm with autograd on the GPU matches the CPU") {
  KILN_REQUIRE_GPU();
  for (DType t : {kFloat32, kFloat16}) {
    CAPTURE(dtype_name(t));
    const double tol = tol_for(t);
    Tensor x = random_input({6, 4, 5, 5}, t, 3.0, 0.5);
    Tensor w = random_input({4}, kFloat32, 1.0, 1.0), b = random_input({4}, kFloat32);
    Tensor g = random_input({6, 4, 5, 5}, t);
    auto run = [&](Device d) {
      // detach(): on the CPU, to() returns the tensor itself, which must stay a leaf for the GPU run.
      Tensor xd = x.detach().to(d).set_requires_grad(true), wd = w.detach().to(d).set_requires_grad(true);
      Tensor bd = b.detach().to(d).set_requires_grad(true);
      Tensor rm = zeros({4}, dtype(kFloat32).device(d)), rv = ones({4}, dtype(kFloat32).device(d));
      Tensor y = op::batch_norm(xd, wd, bd, rm, rv, 0.1, 1e-5);
      (y.to(kFloat32) * g.to(d).to(kFloat32)).sum().backward();
      return std::vector<Tensor>{y.cpu(), rm.cpu(), rv.cpu(), xd.grad().cpu(), wd.grad().cpu(), bd.grad().cpu()};
    };
    auto c = run(kCPU), gg = run(kGpu);
    const char* names[] = {"out", "running_mean", "running_var", "grad_x", "grad_weight", "grad_bias"};
    for (size_t i = 0; i < c.size(); ++i) CHECK_MESSAGE(test::allclose(gg[i], c[i], tol * 5, tol * 5), names[i]);
  }
}

TEST_CASE("batch_norm on the GPU refuses what cuDNN cannot run, naming it") {
  KILN_REQUIRE_GPU();
  Tensor out = gpu_empty({4, 3}, kFloat32), m = gpu_empty({3}, kFloat32), i = gpu_empty({3}, kFloat32), none;
  CHECK_THROWS_WITH(kernels::batch_norm[kGpu](out, m, i, gpu(random_input({4, 3}, kFloat32)), none, none, none, none,
                                              0.1, -1.0),
                    doctest::Contains("batch_norm (cuda): cuDNN needs eps"));
}
