// The GPT of examples/gpt on a GPU against the same GPT on the CPU: one training step's loss,
// every parameter's gradient and the fused AdamW update in f32, then bf16 autocast's dtype flow
// (bf16 logits, an f32 loss, f32 gradients on the f32 parameters) and its loss near f32's. The
// shape exercises each piece GPT-2 124M runs on the GPU: embedding gather and its scatter-add
// backward, the fused q/k/v projection, causal attention, tanh GELU, LayerNorm, cross-entropy over
// a vocabulary that is not a power of two, and the LM head tied to the embedding.
#include <doctest/doctest.h>

#include "amp/amp.h"
#include "models/gpt_model.h"
#include "train/gpt_trainer.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;
using namespace kiln::models::gpt;
using namespace kiln::train::gpt;

namespace {

GPTConfig small() {
  GPTConfig c;
  c.n_layer = 2, c.n_head = 4, c.n_embd = 64, c.block_size = 128, c.vocab_size = 301;
  return c;
}

/// Two copies of one model: the CPU's and the GPU's, with the same weights.
struct Pair {
  std::shared_ptr<GPT> cpu, gpu;
};
Pair make_pair(uint64_t seed) {
  manual_seed(seed);
  Pair p{std::make_shared<GPT>(small()), std::make_shared<GPT>(small())};
  p.gpu->load_state_dict(p.cpu->state_dict());
  p.gpu->to(Device("cuda"));
  return p;
}

/// Random ids in [0, vocab), [B, T], and the next-token targets.
std::pair<Tensor, Tensor> batch(int64_t b, int64_t t, int64_t vocab) {
  Tensor ids = randint(0, vocab, {b, t + 1});
  return {ids.narrow(1, 0, t).contiguous(), ids.narrow(1, 1, t).contiguous()};
}

}  // namespace

TEST_CASE("GPT on CUDA: f32 loss, every gradient and the fused AdamW step match the CPU's") {
  KILN_REQUIRE_GPU();
  Pair m = make_pair(7);
  auto [x, y] = batch(2, 128, small().vocab_size);
  const Device cuda("cuda");
  Tensor loss_cpu = GPT::loss(m.cpu->forward(x), y);
  Tensor loss_gpu = GPT::loss(m.gpu->forward(x.to(cuda)), y.to(cuda));
  CHECK(loss_gpu.device().is_cuda());
  CHECK(loss_gpu.item<double>() == doctest::Approx(loss_cpu.item<double>()).epsilon(1e-5));
  loss_cpu.backward();
  loss_gpu.backward();
  auto cpu_params = m.cpu->named_parameters(), gpu_params = m.gpu->named_parameters();
  REQUIRE(cpu_params.size() == gpu_params.size());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    INFO(cpu_params[i].first);
    Tensor gc = cpu_params[i].second.grad(), gg = gpu_params[i].second.grad();
    REQUIRE(gg.defined());
    CHECK(gg.device().is_cuda());
    CHECK(gc.abs().sum().item<double>() > 0);  // every parameter, wpe and the tied wte included, learns
    CHECK(test::allclose(gg.cpu(), gc, 1e-3, 1e-5));
  }
  TrainConfig c;  // the trainer's AdamW: decay on the matrices only, betas (0.9, 0.95)
  c.lr = 1e-3;
  auto opt_cpu = make_optimizer(c, cpu_params), opt_gpu = make_optimizer(c, gpu_params);
  opt_cpu->step();
  opt_gpu->step();
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    INFO(cpu_params[i].first);
    // Adam's first step moves each weight by about lr: 2e-5 is 2 % of it (a gradient within
    // rounding of zero may differ in its update by that much, not more).
    CHECK(test::allclose(gpu_params[i].second.cpu(), cpu_params[i].second, 1e-4, 2e-5));
  }
}

TEST_CASE("GPT on CUDA under bf16 autocast: bf16 logits, an f32 loss near f32's, f32 gradients") {
  KILN_REQUIRE_GPU();
  Pair m = make_pair(11);
  auto [x, y] = batch(4, 128, small().vocab_size);
  const Device cuda("cuda");
  const double f32_loss = GPT::loss(m.cpu->forward(x), y).item<double>();
  Tensor logits, loss;
  {
    amp::AutocastGuard autocast(kBFloat16);
    logits = m.gpu->forward(x.to(cuda));
    loss = GPT::loss(logits, y.to(cuda));
  }
  CHECK(logits.dtype() == kBFloat16);
  CHECK(loss.dtype() == kFloat32);
  CHECK(loss.item<double>() == doctest::Approx(f32_loss).epsilon(2e-2));
  loss.backward();
  for (auto& [name, p] : m.gpu->named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == kFloat32);
    CHECK(std::isfinite(p.grad().abs().sum().item<double>()));
  }
}
