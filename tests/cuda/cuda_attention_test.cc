// The flash-style CUDA attention (cuda/attention.cc) against the CPU kernel on random inputs,
// forward and backward (q, k, v and an additive mask's gradients): f32, f16, bf16, f64; causal,
// bool and additive masks that broadcast, Tq != Tk, T not a multiple of the tiles, head dims 16
// to 128, custom scale, dropout (both devices draw the same Philox mask). Skipped without a GPU,
// apart from the registration check.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kernels.h"
#include "core/ops.h"
#include "core/ops/attention.h"
#include "nn/attention.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;
namespace F = kiln::nn::functional;
using kiln::test::close_scaled;

namespace {

const Device kGpu("cuda:0");

struct Case {
  Shape q, k, v;
  F::AttentionOptions o;
};

/// Runs one case on both devices with the same inputs (and dropout stream) and compares the
/// output and every gradient.
void compare(const Case& c, DType dt, double tol) {
  Tensor q = randn(c.q).to(dt), k = randn(c.k).to(dt), v = randn(c.v).to(dt);
  Shape out_shape(c.q.begin(), c.q.end() - 1);
  out_shape.push_back(c.v.back());
  Tensor w = randn(out_shape).to(dt);
  const bool mask_grad = c.o.attn_mask.defined() && c.o.attn_mask.dtype() != kBool;
  Generator gen_cpu(17), gen_gpu(17);
  auto run = [&](Device dev, Generator* gen) {
    // detach(): on the CPU, to() returns the tensor itself, which must stay a leaf for the GPU run.
    Tensor qd = q.detach().to(dev).requires_grad_(), kd = k.detach().to(dev).requires_grad_();
    Tensor vd = v.detach().to(dev).requires_grad_();
    F::AttentionOptions o = c.o;
    o.generator = gen;
    if (o.attn_mask.defined()) {
      o.attn_mask = (mask_grad ? o.attn_mask.to(dt) : o.attn_mask).detach().to(dev);
      if (mask_grad) o.attn_mask.requires_grad_();
    }
    Tensor out = F::scaled_dot_product_attention(qd, kd, vd, o);
    (out * w.to(dev)).sum().backward();
    std::vector<Tensor> r = {out, qd.grad(), kd.grad(), vd.grad()};
    if (mask_grad) r.push_back(o.attn_mask.grad());
    return r;
  };
  auto cpu = run(kCPU, &gen_cpu);
  auto gpu = run(kGpu, &gen_gpu);
  REQUIRE(cpu.size() == gpu.size());
  const char* names[] = {"out", "grad_q", "grad_k", "grad_v", "grad_mask"};
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO(names[i], " dtype ", dt, " q ", c.q);
    REQUIRE(gpu[i].defined());
    CHECK(gpu[i].device() == kGpu);
    CHECK(close_scaled(gpu[i], cpu[i], tol));
  }
}

std::vector<Case> cases() {
  Tensor keep = rand({70, 90}) > 0.3;
  keep.slice(1, 0, 1).fill_(true);
  return {
      {{2, 3, 70, 64}, {2, 3, 70, 64}, {2, 3, 70, 64}, {.causal = true}},
      {{1, 2, 3, 33, 16}, {1, 2, 3, 100, 16}, {1, 2, 3, 100, 40}, {.scale = 0.3}},
      {{2, 3, 70, 32}, {2, 3, 90, 32}, {2, 3, 90, 32}, {.attn_mask = keep}},
      {{2, 3, 70, 32}, {2, 3, 90, 32}, {2, 3, 90, 32}, {.attn_mask = randn({3, 1, 90})}},
      {{1, 2, 129, 128}, {1, 2, 129, 128}, {1, 2, 129, 96}, {.causal = true}},
      {{2, 2, 50, 64}, {2, 2, 50, 64}, {2, 2, 50, 64}, {.dropout_p = 0.25, .causal = true}},
  };
}

}  // namespace

TEST_CASE("the CUDA backend registers the fused attention kernels") {
  CHECK(kernels::attention_forward.has(DeviceType::CUDA));
  CHECK(kernels::attention_backward.has(DeviceType::CUDA));
}

TEST_CASE("CUDA attention matches the CPU kernel in f32 and f64, forward and backward") {
  KILN_REQUIRE_GPU();
  manual_seed(1);
  for (const Case& c : cases()) compare(c, kFloat32, 1e-4);
  for (const Case& c : cases()) compare(c, kFloat64, 1e-10);
}

TEST_CASE("CUDA attention matches the CPU kernel in f16 and bf16") {
  KILN_REQUIRE_GPU();
  manual_seed(2);
  for (const Case& c : cases()) compare(c, kFloat16, 2e-2);
  for (const Case& c : cases()) compare(c, kBFloat16, 3e-2);
}

TEST_CASE("CUDA attention refuses head dims above the kernel's limit, naming them") {
  KILN_REQUIRE_GPU();
  Tensor q = randn({1, 1, 4, 160}).to(kGpu);
  CHECK_THROWS_WITH(F::scaled_dot_product_attention(q, q, q), doctest::Contains("head dims up to 128, got q/k 160"));
}
