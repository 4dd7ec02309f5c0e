// nn::checkpoint: the same gradients as without it (dropout included, through the random state it
// replays), gradients reaching parameters when no input requires grad, less memory held between
// forward and backward, and plain evaluation with grad mode off.
#include <doctest/doctest.h>

#include "autograd/node.h"
#include "core/memory/memory_tracker.h"
#include "nn/nn.h"
#include "tests/testing/compare.h"

using namespace kiln;
using kiln::test::max_diff;
namespace F = kiln::nn::functional;

namespace {

struct Block {
  nn::Linear a{16, 32}, b{32, 16};
  Tensor operator()(const Tensor& x) { return b(F::dropout(gelu(a(x)), 0.3, true)); }
  std::vector<Tensor> params() { return {a.weight, a.bias, b.weight, b.bias}; }
};

std::vector<Tensor> grads_of(const std::vector<Tensor>& ts) {
  std::vector<Tensor> g;
  for (const Tensor& t : ts) g.push_back(t.grad());
  return g;
}

}  // namespace

TEST_CASE("checkpoint gives the gradients of the plain run, dropout included") {
  manual_seed(1);
  Block blk;
  Tensor x = randn({8, 16}).requires_grad_();
  auto params = blk.params();
  params.push_back(x);

  manual_seed(7);
  Tensor plain = blk(blk(x));
  plain.square().sum().backward();
  const GeneratorState after_plain = default_generator().state();
  auto g_plain = grads_of(params);
  for (Tensor& p : params) p.set_grad(Tensor());

  manual_seed(7);
  Tensor h = nn::checkpoint([&](const Tensor& in) { return blk(in); }, x);
  Tensor ck = nn::checkpoint([&](const Tensor& in) { return blk(in); }, h);
  CHECK(max_diff(ck, plain) == 0.0);
  CHECK(ck.grad_fn()->name() == "CheckpointBackward");
  // Backward replays the forward's random state and then puts the current one back.
  CHECK(default_generator().state().offset == after_plain.offset);
  ck.square().sum().backward();
  CHECK(default_generator().state().offset == after_plain.offset);
  auto g_ck = grads_of(params);
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("tensor ", i);
    REQUIRE(g_ck[i].defined());
    CHECK(max_diff(g_ck[i], g_plain[i]) < 1e-6);
  }
}

TEST_CASE("checkpoint reaches parameters when no input requires grad, and an explicit generator") {
  manual_seed(2);
  nn::Linear lin(6, 4);
  Generator gen(3);
  Tensor x = randn({5, 6});
  auto run = [&](const Tensor& in) { return F::dropout(lin(in), 0.5, true, &gen); };
  gen.manual_seed(3);
  run(x).sum().backward();
  Tensor gw = lin.weight.grad();
  lin.weight.set_grad(Tensor());
  lin.bias.set_grad(Tensor());
  gen.manual_seed(3);
  Tensor y = nn::checkpoint(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{run(in[0])}; }, {x},
      nn::CheckpointOptions{.generators = {&gen}})[0];
  y.sum().backward();
  REQUIRE(lin.weight.grad().defined());
  CHECK(max_diff(lin.weight.grad(), gw) < 1e-6);
  CHECK(!x.grad().defined());
}

TEST_CASE("checkpoint with the fused attention and its dropout inside") {
  manual_seed(4);
  Tensor q = randn({2, 2, 20, 8}).requires_grad_(), k = randn({2, 2, 20, 8}).requires_grad_(),
         v = randn({2, 2, 20, 8}).requires_grad_();
  auto attn = [](const Tensor& a, const Tensor& b, const Tensor& c) {
    return F::scaled_dot_product_attention(a, b, c, {.dropout_p = 0.2, .causal = true}).tanh();
  };
  manual_seed(5);
  attn(q, k, v).sum().backward();
  auto g = grads_of({q, k, v});
  for (Tensor t : {q, k, v}) t.set_grad(Tensor());
  manual_seed(5);
  nn::checkpoint(attn, q, k, v).sum().backward();
  auto gc = grads_of({q, k, v});
  for (int i = 0; i < 3; ++i) CHECK(max_diff(gc[i], g[i]) < 1e-6);
}

TEST_CASE("checkpointed blocks hold less memory between forward and backward") {
  manual_seed(6);
  std::vector<std::unique_ptr<nn::Linear>> layers;
  for (int i = 0; i < 16; ++i) layers.push_back(std::make_unique<nn::Linear>(256, 256));
  Tensor x = randn({512, 256}).requires_grad_();
  auto block = [&](int i, const Tensor& h) {
    return (*layers[2 * i + 1])(gelu((*layers[2 * i])(h))).tanh();
  };
  auto measure = [&](bool use_checkpoint) {
    CpuMemoryTracker tracker;
    Tensor h = x;
    for (int i = 0; i < 8; ++i)
      h = use_checkpoint ? nn::checkpoint([&, i](const Tensor& in) { return block(i, in); }, h) : block(i, h);
    Tensor loss = h.square().mean();
    const size_t held = tracker.live_bytes();
    loss.backward();
    return std::make_pair(held, tracker.peak_bytes());
  };
  auto [plain_held, plain_peak] = measure(false);
  Tensor g_plain = x.grad();
  x.set_grad(Tensor());
  for (auto& l : layers) l->weight.set_grad(Tensor()), l->bias.set_grad(Tensor());
  auto [ck_held, ck_peak] = measure(true);
  MESSAGE("held after forward: plain ", plain_held, " B, checkpointed ", ck_held, " B; peak ", plain_peak, " vs ",
          ck_peak);
  CHECK(ck_held * 5 < plain_held * 2);  // plain keeps 3 activations per block, checkpoint 1
  CHECK(ck_peak < plain_peak);
  CHECK(max_diff(x.grad(), g_plain) < 1e-6);
}

TEST_CASE("checkpoint with grad mode off is the plain call; an input returned as is stays a leaf") {
  Tensor x = randn({3}).requires_grad_();
  {
    NoGradGuard g;
    Tensor y = nn::checkpoint([](const Tensor& a) { return a * 2.0; }, x);
    CHECK(!y.requires_grad());
  }
  Tensor y = nn::checkpoint([](const Tensor& a) { return a; }, x);
  CHECK(x.is_leaf());
  (y * 3.0).sum().backward();
  CHECK(max_diff(x.grad(), full({3}, 3.0)) == 0.0);
}
