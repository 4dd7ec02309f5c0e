// Dropout under tensor parallelism (distributed/tensor_parallel/random.h, Megatron's RNG tracker)
// on 2 and 4 real processes: masks in a replicated region are identical on every tensor rank and
// masks in a sharded region differ by rank, with the default generator left alike everywhere;
// in TensorParallelGPT the attention over each rank's heads drops differently per rank (a GPT
// whose heads are all copies of head 0 gets different head gradients on each rank, and equal ones
// without dropout) while the replicated parameters' gradients stay equal; and a TP run with
// dropout (with and without sequence parallelism) repeats bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include <fmt/ranges.h>

#include "core/generator.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "distributed/backend/init.h"
#include "distributed/tensor_parallel/random.h"
#include "models/gpt_tensor_parallel.h"
#include "optim/optim.h"
#include "tests/distributed/multiprocess.h"
#include "tests/testing/compare.h"

namespace kiln {
namespace {

using test::expect;
using models::gpt::GPT;
using models::gpt::GPTConfig;
using models::gpt::TensorParallelGPT;
namespace tp = dist::tp;

/// The largest difference between this rank's `t` and any other rank's.
double spread(const Tensor& t, dist::ProcessGroup& pg) {
  Tensor all = tp::all_gather(t.detach().contiguous().reshape({1, -1}), pg, 0);
  double d = 0;
  for (int r = 1; r < pg.size(); ++r) d = std::max(d, test::max_diff(all.narrow(0, r, 1), all.narrow(0, 0, 1)));
  return d;
}

void masks_by_region(int, int) {
  auto pg = dist::init_process_group();
  manual_seed(7);
  Tensor x = ones({4, 64});
  Tensor replicated = tp::parallel_dropout(x, 0.5, true, *pg, /*sharded=*/false);
  Tensor sharded = tp::parallel_dropout(x, 0.5, true, *pg, /*sharded=*/true);
  Tensor sharded_again = tp::parallel_dropout(x, 0.5, true, *pg, /*sharded=*/true);
  expect(spread(replicated, *pg) == 0, "replicated-region masks differ across ranks by {}", spread(replicated, *pg));
  // 256 elements at p = 0.5: equal masks on two ranks by chance has probability 2^-256.
  expect(spread(sharded, *pg) > 0, "sharded-region masks are the same on every rank");
  expect(test::max_diff(sharded, sharded_again) > 0, "two sharded draws gave the same mask");
  expect(test::max_diff(tp::parallel_dropout(x, 0.5, false, *pg, true), x) == 0, "dropout in eval changed x");
  // The default generator moved alike on every rank, so later replicated draws still agree.
  const GeneratorState s = default_generator().state();
  Tensor state = tensor({static_cast<double>(s.seed % 1000003), static_cast<double>(s.offset)}, dtype(kFloat64));
  expect(spread(state, *pg) == 0, "the default generators drifted apart");
  // The same seed gives the same masks again.
  manual_seed(7);
  Tensor r2 = tp::parallel_dropout(x, 0.5, true, *pg, false), s2 = tp::parallel_dropout(x, 0.5, true, *pg, true);
  expect(test::max_diff(r2, replicated) == 0 && test::max_diff(s2, sharded) == 0, "reseeded draws differ");
}

TEST_CASE("replicated-region dropout masks are equal on every tensor rank, sharded-region masks differ (2 and 4 ranks)") {
  for (int n : {2, 4}) test::require_all_ok(test::run_ranks(n, masks_by_region, 60, "tp_dropout_masks"));
}

GPTConfig tiny(int heads, double dropout) {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = heads;
  c.n_embd = 32;
  c.block_size = 16;
  c.vocab_size = 64;
  c.dropout = dropout;
  return c;
}

/// Every head of every block a copy of head 0 (q, k, v rows and c_proj's input columns).
void copy_head_zero(GPT& whole) {
  NoGradGuard no_grad;
  const int64_t c = whole.config.n_embd, hd = c / whole.config.n_head;
  for (auto& [name, p] : whole.named_parameters()) {
    Tensor t = p.detach();
    if (name.ends_with("attn.c_attn.weight") || name.ends_with("attn.c_attn.bias"))
      for (int64_t part = 0; part < 3; ++part)
        for (int64_t h = 1; h < whole.config.n_head; ++h) t.narrow(0, part * c + h * hd, hd).copy_(t.narrow(0, part * c, hd));
    if (name.ends_with("attn.c_proj.weight"))
      for (int64_t h = 1; h < whole.config.n_head; ++h) t.narrow(1, h * hd, hd).copy_(t.narrow(1, 0, hd));
  }
}

/// One head per rank, all heads alike: with dropout the ranks' head gradients differ (their
/// attention masks do), without it they are equal; the replicated parameters' gradients are
/// equal either way.
void attention_masks_per_rank(int, int world, double dropout) {
  auto pg = dist::init_process_group();
  manual_seed(31);
  GPT whole(tiny(world, dropout));
  copy_head_zero(whole);
  TensorParallelGPT split(whole, pg);
  split.train();
  Generator g(8);
  Tensor idx = randint(0, 64, {2, 12}, kInt64, &g), targets = randint(0, 64, {2, 12}, kInt64, &g);
  split.loss(split.forward(idx), targets).backward();
  for (auto& [name, p] : split.named_parameters()) {
    const double d = spread(p.grad(), *pg);
    if (models::gpt::parameter_split(name).dim < 0) {
      expect(d <= 1e-6, "dropout {}: replicated {}'s gradient differs across ranks by {}", dropout, name, d);
    } else if (name.ends_with("attn.c_attn.weight")) {
      if (dropout > 0) expect(d > 1e-4, "dropout {}: {}'s gradient is the same on every rank ({})", dropout, name, d);
      else expect(d <= 1e-6, "no dropout: {}'s gradient differs across ranks by {} (the heads are copies)", name, d);
    }
  }
}

TEST_CASE("TensorParallelGPT drops each rank's heads with its own mask; replicated gradients stay equal (2 and 4 ranks)") {
  for (int n : {2, 4})
    for (double dropout : {0.3, 0.0})
      test::require_all_ok(test::run_ranks(n, [dropout](int r, int w) { attention_masks_per_rank(r, w, dropout); }, 90,
                                           "tp_dropout_heads"));
}

/// Three AdamW steps of a TP GPT with dropout: the losses and the weights.
std::pair<std::vector<float>, std::vector<Tensor>> train_three(const dist::tp::GroupPtr& pg, bool sp, double dropout) {
  manual_seed(31);
  GPT whole(tiny(4, dropout));
  TensorParallelGPT split(whole, pg, sp);
  split.train();
  optim::AdamW opt(split.parameters(), optim::AdamOptions(3e-3));
  std::vector<float> losses;
  for (int step = 0; step < 3; ++step) {
    Generator gs(40 + static_cast<uint64_t>(step));
    Tensor idx = randint(0, 64, {2, 12}, kInt64, &gs), targets = randint(0, 64, {2, 12}, kInt64, &gs);
    Tensor loss = split.loss(split.forward(idx), targets);
    loss.backward();
    opt.step();
    opt.zero_grad();
    losses.push_back(loss.item<float>());
  }
  std::vector<Tensor> weights;
  for (const Tensor& p : split.parameters()) weights.push_back(p.detach().clone());
  return {losses, weights};
}

void repeats_bit_for_bit(int, int, bool sp) {
  auto pg = dist::init_process_group();
  auto [la, wa] = train_three(pg, sp, 0.2);
  auto [lb, wb] = train_three(pg, sp, 0.2);
  auto [l0, w0] = train_three(pg, sp, 0.0);
  expect(la == lb, "losses {} then {}", la, lb);
  for (size_t i = 0; i < wa.size(); ++i) expect(test::max_diff(wa[i], wb[i]) == 0, "weight {} differs between runs", i);
  expect(la != l0, "the losses with dropout ({}) equal those without ({})", la, l0);
}

TEST_CASE("a tensor-parallel run with dropout repeats bit for bit, with and without sequence parallelism (2 ranks)") {
  for (bool sp : {false, true})
    test::require_all_ok(test::run_ranks(2, [sp](int r, int w) { repeats_bit_for_bit(r, w, sp); }, 90,
                                         "tp_dropout_repeat"));
}

}  // namespace
}  // namespace kiln
