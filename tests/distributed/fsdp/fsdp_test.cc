// FSDP (ZeRO-3, and ZeRO-2 as kShardGradOp) on 2, 3 and 4 real processes against one process
// training the same model on the union of the ranks' batches: parameters after several AdamW
// steps (with gradient accumulation and global-norm clipping), each rank's share of the
// parameters, gradients and optimizer state (1/N, padding aside), the gathered buffers freed
// between uses, the reduce-scatters launched while backward runs, and the construction errors.
#include <doctest/doctest.h>

#include "amp/autocast.h"
#include "autograd/autograd.h"
#include "core/memory/memory_tracker.h"
#include "distributed/fsdp/fsdp.h"
#include "distributed/backend/init.h"
#include "optim/optim.h"
#include "tests/distributed/fsdp/fsdp_test_util.h"
#include "tests/distributed/multiprocess.h"

namespace kiln {
namespace {

using test::expect;
namespace F = nn::functional;

struct Case {
  dist::ShardingStrategy strategy = dist::ShardingStrategy::kFullShard;
  int micro = 1;          // micro-batches accumulated per step
  double clip = 0;        // max gradient norm (0: none)
  bool sgd = false;       // SGD with momentum (a wrong gradient scale shows; Adam hides most of it)
  bool bf16 = false;      // forward under autocast(bf16), on both sides
};

std::unique_ptr<optim::Optimizer> make_optimizer(std::vector<Tensor> params, bool sgd) {
  if (sgd) return std::make_unique<optim::SGD>(std::move(params), optim::SGDOptions(0.1).set_momentum(0.9));
  return std::make_unique<optim::AdamW>(std::move(params), optim::AdamOptions(1e-2));
}

void matches_one_process(int rank, int world, Case c) {
  auto pg = dist::init_process_group();
  manual_seed(5);
  auto reference = std::make_shared<test::FsdpNet>();
  manual_seed(5 + rank);  // FSDP takes rank 0's weights
  auto model = std::make_shared<test::FsdpNet>();
  dist::FullyShardedDataParallel fsdp(model, pg, {.units = {"h"}, .strategy = c.strategy});
  expect(fsdp.units().size() == 4, "{} units, want the root and 3 blocks", fsdp.units().size());
  expect(fsdp.gathered_bytes() == 0, "{} bytes gathered after construction", fsdp.gathered_bytes());
  std::unique_ptr<optim::Optimizer> ref_opt = make_optimizer(reference->parameters(), c.sgd);
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(fsdp.shards(), c.sgd);
  for (int step = 0; step < 4; ++step) {
    for (int m = 0; m < c.micro; ++m) {
      test::FsdpBatch whole = test::fsdp_batch(step * c.micro + m, world), mine = test::fsdp_batch(step * c.micro + m, world, rank);
      {
        amp::AutocastGuard autocast(kBFloat16, c.bf16);
        (F::cross_entropy(reference->forward(whole.x), whole.y) / static_cast<double>(c.micro)).backward();
      }
      Tensor out;
      {
        amp::AutocastGuard autocast(kBFloat16, c.bf16);
        out = fsdp.forward(mine.x);
      }
      expect(out.dtype() == (c.bf16 ? kBFloat16 : kFloat32), "the forward ran in {}", out.dtype());
      if (c.strategy == dist::ShardingStrategy::kFullShard) {
        const int64_t root = fsdp.units()[0].padded * 4;
        expect(fsdp.gathered_bytes() == root, "after forward {} bytes gathered, want the root's {}",
               fsdp.gathered_bytes(), root);
      }
      (F::cross_entropy(out, mine.y) / static_cast<double>(c.micro)).backward();
      expect(fsdp.gathered_bytes() == 0, "after backward {} bytes still gathered", fsdp.gathered_bytes());
      expect(fsdp.stats().reduce_scatters == 4 && fsdp.stats().launched_during_backward >= 3,
             "{} reduce-scatters, {} started during backward", fsdp.stats().reduce_scatters,
             fsdp.stats().launched_during_backward);
    }
    if (c.clip > 0) {
      const double want = optim::clip_grad_norm_(reference->parameters(), c.clip);
      const double got = fsdp.clip_grad_norm_(c.clip);
      expect(std::abs(want - got) <= 1e-5 * std::max(1.0, want), "step {}: global norm {} sharded, {} whole", step, got,
             want);
    }
    for (const Tensor& p : model->parameters()) expect(!p.grad().defined(), "a model parameter kept a gradient");
    ref_opt->step();
    opt->step();
    ref_opt->zero_grad();
    opt->zero_grad();
  }
  nn::StateDict got = fsdp.full_state_dict();
  for (auto& [name, p] : reference->named_parameters()) {
    expect(got.count(name) == 1, "full_state_dict lacks {}", name);
    const double d = (got.at(name) - p).abs().max().item<float>();
    // bf16: the one process and the ranks round different batch sizes' products alike, but the
    // sums over the batch differ in order; one bf16 step is ~4e-3 relative.
    const double tol = c.bf16 ? 2e-3 : 2e-5;
    expect(d <= tol, "on {} ranks: {} differs from one process by {} (tolerance {})", world, name, d, tol);
  }
  // Each rank holds 1/N of the parameters and of Adam's two moments.
  int64_t shard_numel = 0, padded = 0, state = 0;
  for (const Tensor& s : fsdp.shards()) shard_numel += s.numel();
  for (const auto& u : fsdp.units()) padded += u.padded;
  for (int64_t i = 0; i < 4; ++i)
    for (const auto& [name, t] : opt->state(i)) state += t.dim() == 1 ? t.numel() : 0;
  const int64_t buffers = c.sgd ? 1 : 2;  // momentum, or Adam's two moments
  expect(shard_numel * world == padded && state == buffers * shard_numel, "shards {} of {} padded, state {}",
         shard_numel, padded, state);
}

TEST_CASE("FSDP full shard matches one process on 2, 3 and 4 ranks") {
  for (int n : {2, 3, 4})
    test::require_all_ok(test::run_ranks(n, [](int r, int w) { matches_one_process(r, w, {}); }, 180,
                                         "fsdp_full" + std::to_string(n)));
}

TEST_CASE("FSDP shard-grad-op (ZeRO-2) with accumulation and clipping matches one process on 2 and 3 ranks") {
  Case c{dist::ShardingStrategy::kShardGradOp, 2, 0.3, /*sgd=*/false};
  for (int n : {2, 3})
    test::require_all_ok(test::run_ranks(n, [c](int r, int w) { matches_one_process(r, w, c); }, 180,
                                         "fsdp_zero2_" + std::to_string(n)));
}

TEST_CASE("FSDP full shard with accumulation and clipping on 4 ranks") {
  Case c{dist::ShardingStrategy::kFullShard, 2, 0.3};
  test::require_all_ok(test::run_ranks(4, [c](int r, int w) { matches_one_process(r, w, c); }, 180, "fsdp_clip4"));
}

TEST_CASE("FSDP with SGD and momentum (the gradient's scale shows) on 2 and 3 ranks, both strategies") {
  for (auto strategy : {dist::ShardingStrategy::kFullShard, dist::ShardingStrategy::kShardGradOp}) {
    Case c{strategy, 1, 0, /*sgd=*/true};
    for (int n : {2, 3})
      test::require_all_ok(test::run_ranks(n, [c](int r, int w) { matches_one_process(r, w, c); }, 180,
                                           "fsdp_sgd" + std::to_string(n)));
  }
}

TEST_CASE("FSDP under bf16 autocast (f32 shards) stays within bf16's tolerance of one process, 2 and 4 ranks") {
  Case c{dist::ShardingStrategy::kFullShard, 1, 0, /*sgd=*/true, /*bf16=*/true};
  for (int n : {2, 4})
    test::require_all_ok(test::run_ranks(n, [c](int r, int w) { matches_one_process(r, w, c); }, 180,
                                         "fsdp_bf16_" + std::to_string(n)));
}

// Each unit's whole gradient lives only until its reduce-scatter completes (two in flight), so
// backward never holds the whole model's gradient at once. ZeRO-2 keeps the parameters gathered,
// so what backward adds is gradients (and the small activations' gradients).
TEST_CASE("FSDP backward holds a few units' gradients, not the whole model's, on 2 ranks") {
  test::require_all_ok(test::run_ranks(2, [](int rank, int world) {
    auto pg = dist::init_process_group();
    manual_seed(5);
    auto model = std::make_shared<test::FsdpNet>(/*blocks=*/16, /*c=*/96);
    dist::FullyShardedDataParallel fsdp(model, pg, {.units = {"h"}, .strategy = dist::ShardingStrategy::kShardGradOp});
    int64_t whole = 0;  // the whole model's gradient, f32
    for (const auto& u : fsdp.units()) whole += u.padded * 4;
    test::FsdpBatch mine = test::fsdp_batch(0, world, rank);
    CpuMemoryTracker tracker;
    Tensor loss = F::cross_entropy(fsdp.forward(mine.x), mine.y);
    const int64_t before = static_cast<int64_t>(tracker.live_bytes());
    tracker.reset_peak();
    loss.backward();
    const int64_t rise = static_cast<int64_t>(tracker.peak_bytes()) - before;
    expect(rise < whole / 2, "backward's peak rose by {} bytes; the whole gradient is {} (17 units)", rise, whole);
  }, 60, "fsdp_grad_memory"));
}

TEST_CASE("FSDP construction errors name the module") {
  test::require_all_ok(test::run_ranks(2, [](int, int) {
    auto pg = dist::init_process_group();
    bool missing = false, not_seq = false;
    try {
      dist::FullyShardedDataParallel f(std::make_shared<test::FsdpNet>(), pg, {.units = {"blocks"}});
    } catch (const Error& e) {
      missing = std::string(e.what()).find("the model has no module 'blocks'") != std::string::npos;
    }
    try {
      dist::FullyShardedDataParallel f(std::make_shared<test::FsdpNet>(), pg, {.units = {"in"}});
    } catch (const Error& e) {
      not_seq = std::string(e.what()).find("'in' is a Linear, not a Sequential") != std::string::npos;
    }
    expect(missing && not_seq, "errors: missing module {}, not a Sequential {}", missing, not_seq);
  }, 60, "fsdp_errors"));
}

}  // namespace
}  // namespace kiln
