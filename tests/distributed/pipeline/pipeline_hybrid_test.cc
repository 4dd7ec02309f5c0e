// Process subgroups (new_group) and hybrid pipeline x data parallel: 4 ranks as 2 stages x 2
// replicas, DDP within each stage's replica group, train exactly as one process on the whole
// batch, and bring the last stages' metrics, reduced over the replicas, to every rank.
#include <doctest/doctest.h>

#include "autograd/autograd.h"
#include "distributed/backend/init.h"
#include "distributed/pipeline/pipeline.h"
#include "optim/optim.h"
#include "tests/distributed/pipeline/pipeline_helpers.h"

namespace kiln {
namespace {

using test::expect;

constexpr auto ce = test::pipeline_ce;

TEST_CASE("new_group: members get a group of their own ranks, others get null") {
  test::require_all_ok(test::run_ranks(3, [](int rank, int) {
    auto world = dist::init_process_group();
    auto even = dist::new_group({0, 2});
    auto all = dist::new_group({0, 1, 2});
    expect((even != nullptr) == (rank != 1), "rank {}: membership of [0, 2] is wrong", rank);
    if (even) {
      expect(even->size() == 2 && even->rank() == rank / 2, "rank {}: group rank {} of {}", rank, even->rank(),
             even->size());
      Tensor t = full({3}, rank + 1.0);
      even->allreduce(t)->wait();
      expect(t.min().item<float>() == 4 && t.max().item<float>() == 4, "rank {}: sum {} over [0, 2]", rank,
             t.max().item<float>());
    }
    Tensor u = full({1}, 1.0);
    all->allreduce(u)->wait();
    world->allreduce(u)->wait();
    expect(u.item<float>() == 9, "rank {}: {} after the full subgroup and the world", rank, u.item<float>());
    std::string msg = "no error";
    try {
      dist::new_group({2, 0});
    } catch (const std::exception& e) {
      msg = e.what();
    }
    expect(msg.find("new_group: ranks [2, 0] must be distinct, increasing and within the world of 3 ranks") !=
               std::string::npos,
           "got: {}", msg);
    world->barrier()->wait();
  }, 120, "new_group"));
}

// Replica r trains on its half of each global batch; DDP averages the replicas' gradients.
void hybrid(int rank, int world, dist::Schedule sched, int m, int chunks = 1) {
  dist::init_process_group();
  dist::PipelineGroups g = dist::pipeline_groups(2);
  expect(g.stage == rank % 2 && g.replica == rank / 2, "rank {}: stage {} replica {}", rank, g.stage, g.replica);
  dist::PipelineOptions o;
  o.micro_batches = m;
  o.schedule = sched;
  o.virtual_stages = chunks;
  o.data_parallel_group = g.data;
  manual_seed(100 + rank);
  // Different initial weights per replica: DDP must give every replica rank 0's.
  dist::Pipeline pipe(test::pipeline_mlp(g.replica == 0 ? 7 : 8), g.pipeline, o);
  auto reference = test::pipeline_mlp(7);
  optim::SGD opt(pipe.parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
  const int replicas = world / 2;
  for (int step = 0; step < 4; ++step) {
    test::PipeBatch b = test::pipeline_batch(step, 16);
    const int64_t rows = 16 / replicas;
    opt.zero_grad();
    pipe.train_step(b.x.narrow(0, g.replica * rows, rows), b.y.narrow(0, g.replica * rows, rows), ce);
    opt.step();
    ref_opt.zero_grad();
    ce(reference->forward(b.x), b.y).backward();
    ref_opt.step();
  }
  test::expect_stage_matches(pipe, *reference, 1e-5, fmt::format("hybrid 2x{} {} m={} v={}", replicas,
                                                                 dist::schedule_name(sched), m, chunks));
  // Metrics: the last stages' values, reduced over the replicas, reach every rank; the other
  // stages' values are ignored. The last stages are ranks 1 and 3 (replicas 0 and 1).
  const double mine = pipe.is_last() ? 10.0 * (g.replica + 1) : -1000.0;
  const std::vector<double> avg = pipe.from_last_stage({mine, 1.0 + rank}, dist::ReduceOp::kAvg);
  const std::vector<double> sum = pipe.from_last_stage({mine});
  expect(avg.size() == 2 && avg[0] == 15 && avg[1] == 3 && sum.size() == 1 && sum[0] == 30,
         "rank {}: from_last_stage gave avg [{}, {}], sum {}", rank, avg[0], avg[1], sum[0]);
}

TEST_CASE("hybrid 2 stages x 2 replicas equals one process on the whole batch (GPipe, 1F1B, interleaved)") {
  test::require_all_ok(
      test::run_ranks(4, [](int r, int w) { hybrid(r, w, dist::Schedule::k1F1B, 4); }, 120, "hybrid_1f1b"));
  test::require_all_ok(
      test::run_ranks(4, [](int r, int w) { hybrid(r, w, dist::Schedule::kGPipe, 2); }, 120, "hybrid_gpipe"));
  // Each chunk's replicas average in that chunk's last backward, one DDP per chunk.
  test::require_all_ok(test::run_ranks(
      4, [](int r, int w) { hybrid(r, w, dist::Schedule::kInterleaved1F1B, 2, 2); }, 120, "hybrid_interleaved"));
}

}  // namespace
}  // namespace kiln
