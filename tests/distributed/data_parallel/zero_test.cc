// ZeRO stage 1 on 2 and 3 real processes: training matches plain DDP with the same optimizer
// (SGD, Adam, AdamW; parameter groups, no_sync accumulation, clipping, loss scaling), each rank
// holds ~1/N of the optimizer state, and checkpoints (consolidated and sharded) round-trip
// between sharded and unsharded runs.
#include <doctest/doctest.h>

#include <filesystem>
#include <limits>

#include "amp/grad_scaler.h"
#include "autograd/autograd.h"
#include "core/generator.h"
#include "core/ops.h"
#include "train/distributed_checkpoint.h"
#include "distributed/data_parallel/ddp.h"
#include "distributed/backend/init.h"
#include "distributed/data_parallel/scaler_sync.h"
#include "distributed/data_parallel/zero.h"
#include "train/zero_checkpoint.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/distributed/multiprocess.h"
#include "tests/distributed/data_parallel/zero_test_util.h"

namespace kiln {
namespace {

using test::expect;
namespace F = nn::functional;

using test::small_buckets;

std::shared_ptr<nn::Sequential> make_model() { return test::zero_test_model(32); }

struct Batch {
  Tensor x, y;
};
Batch batch(int step, int rank, int world) {
  Generator g(500 + static_cast<uint64_t>(step));
  const int64_t per_rank = 6;
  Tensor x = randn({per_rank * world, 12}, {}, &g), y = randint(0, 5, {per_rank * world}, kInt64, &g);
  return {x.narrow(0, rank * per_rank, per_rank), y.narrow(0, rank * per_rank, per_rank)};
}

double max_param_diff(nn::Module& a, nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  double d = 0;
  for (size_t i = 0; i < pa.size(); ++i) d = std::max(d, static_cast<double>((pa[i] - pb[i]).abs().max().item<float>()));
  return d;
}

// Two parameter groups (the last layer with its own lr and weight decay) for optimizer `kind`.
std::vector<optim::ParamGroup> groups_of(nn::Sequential& m, const std::string& kind) {
  auto p = m.parameters();
  std::vector<Tensor> body(p.begin(), p.end() - 2), head(p.end() - 2, p.end());
  optim::Options head_options = {{"lr", kind == "sgd" ? 0.05 : 3e-3}, {"weight_decay", 0.1}};
  return {optim::ParamGroup(body), optim::ParamGroup(head, head_options)};
}

dist::OptimizerFactory factory(const std::string& kind) {
  if (kind == "sgd") return dist::optimizer_factory<optim::SGD>(optim::SGDOptions(0.1).set_momentum(0.9).set_nesterov());
  if (kind == "adam") return dist::optimizer_factory<optim::Adam>(optim::AdamOptions(1e-2).set_weight_decay(1e-3));
  return dist::optimizer_factory<optim::AdamW>(optim::AdamOptions(1e-2));
}

// DDP + ZeRO(kind) against DDP + kind on the same data; `micro` > 1 accumulates under no_sync.
void zero_matches_ddp(int rank, int world, const std::string& kind, int micro, bool shm = true) {
  // Off: DDP all-reduces with Gloo's TCP ring and ZeRO reduce-scatters with its own ring, which
  // sum in different orders (on shared memory both sum in rank order).
  setenv("KILN_SHM_ALLREDUCE", shm ? "1" : "0", 1);
  auto pg = dist::init_process_group();
  manual_seed(11 + rank);  // DDP copies rank 0's
  auto a = make_model();
  auto b = make_model();
  dist::DistributedDataParallel ddp_a(a, pg, small_buckets()), ddp_b(b, pg, small_buckets());
  {
    NoGradGuard no_grad;
    auto pa = a->parameters(), pb = b->parameters();
    for (size_t i = 0; i < pa.size(); ++i) pb[i].copy_(pa[i]);
  }
  std::unique_ptr<optim::Optimizer> plain = factory(kind)(groups_of(*a, kind));
  dist::ZeroRedundancyOptimizer zero(ddp_b, groups_of(*b, kind), factory(kind));
  expect(zero.reducer().buckets().size() >= 3, "expected several buckets, got {}", zero.reducer().buckets().size());
  for (int step = 0; step < 6; ++step) {
    if (step == 4) {  // a scheduler's change reaches the wrapped optimizer
      plain->set_lr(plain->lr() / 2);
      zero.set_lr(zero.lr() / 2);
    }
    for (int m = 0; m < micro; ++m) {
      Batch bt = batch(step * micro + m, rank, world);
      auto run = [&](dist::DistributedDataParallel& ddp) { (F::cross_entropy(ddp(bt.x), bt.y) / micro).backward(); };
      if (m + 1 < micro) {
        auto ga = ddp_a.no_sync();
        auto gb = ddp_b.no_sync();
        run(ddp_a);
        run(ddp_b);
      } else {
        run(ddp_a);
        run(ddp_b);
      }
    }
    for (const Tensor& p : b->parameters())
      expect(!p.grad().defined(), "a parameter kept its full gradient after the reduce-scatter");
    expect(ddp_b.stats().launched_during_backward >= ddp_b.stats().buckets - 1,
           "only {} of {} reduce-scatters started during backward", ddp_b.stats().launched_during_backward,
           ddp_b.stats().buckets);
    plain->step();
    zero.step();
    plain->zero_grad();
    zero.zero_grad();
  }
  const double d = max_param_diff(*a, *b);
  expect(d <= 1e-6, "{} on {} ranks: ZeRO-1 differs from DDP by {}", kind, world, d);
  // Each rank holds its shard of the state: 1/N of DDP's, plus at most the padding.
  int64_t full = 0;
  for (int64_t i = 0; i < plain->num_params(); ++i)
    for (const auto& [name, t] : plain->state(i)) full += t.numel() * static_cast<int64_t>(t.element_size());
  const int64_t slack = static_cast<int64_t>(zero.reducer().buckets().size()) * world * 2 * 8 + 64;
  expect(zero.state_bytes() * world >= full && zero.state_bytes() <= full / world + slack,
         "{}: {} state bytes on this rank, unsharded {} over {} ranks", kind, zero.state_bytes(), full, world);
}

TEST_CASE("ZeRO-1 matches DDP after several steps, SGD (nesterov, two groups, no_sync), on 2 and 3 ranks") {
  test::require_all_ok(test::run_ranks(2, [](int r, int w) { zero_matches_ddp(r, w, "sgd", 2); }, 180, "zero_sgd2"));
  test::require_all_ok(test::run_ranks(3, [](int r, int w) { zero_matches_ddp(r, w, "sgd", 1); }, 180, "zero_sgd3"));
}

TEST_CASE("ZeRO-1 matches DDP after several steps, Adam, on 2 and 3 ranks") {
  test::require_all_ok(test::run_ranks(2, [](int r, int w) { zero_matches_ddp(r, w, "adam", 1); }, 180, "zero_adam2"));
  test::require_all_ok(test::run_ranks(3, [](int r, int w) { zero_matches_ddp(r, w, "adam", 2); }, 180, "zero_adam3"));
}

TEST_CASE("ZeRO-1 over Gloo's TCP transport (ring reduce-scatter) matches DDP's ring all-reduce, Adam, 3 ranks") {
  test::require_all_ok(
      test::run_ranks(3, [](int r, int w) { zero_matches_ddp(r, w, "adam", 1, /*shm=*/false); }, 180, "zero_tcp3"));
}

TEST_CASE("ZeRO-1 matches DDP after several steps, AdamW, on 2 and 3 ranks") {
  test::require_all_ok(test::run_ranks(2, [](int r, int w) { zero_matches_ddp(r, w, "adamw", 1); }, 180, "zero_adamw2"));
  test::require_all_ok(test::run_ranks(3, [](int r, int w) { zero_matches_ddp(r, w, "adamw", 1); }, 180, "zero_adamw3"));
}

}  // namespace
}  // namespace kiln
