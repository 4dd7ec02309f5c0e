// The α-β model (bench/scaling_math.h): the fit recovers α and B from exact ring timings of each
// collective, the collective formulas, and the DDP and ZeRO-1 steps' overlap arithmetic on
// hand-worked cases.
#include <doctest/doctest.h>

#include "bench/scaling_math.h"
#include "core/error.h"

namespace kiln::bench {
namespace {

TEST_CASE("fit_allreduce recovers α and B from ring timings, ignoring sizes below the cut") {
  const AlphaBeta truth{20e-6, 1.5e9};
  for (int n : {2, 3, 8}) {
    std::vector<std::pair<double, double>> pts;
    for (double bytes = 4; bytes <= 64e6; bytes *= 4) pts.push_back({bytes, allreduce_seconds(truth, n, bytes)});
    pts.push_back({16, 1.0});  // a wild small-message point, below the cut
    AlphaBeta m = fit_allreduce(pts, n, 1024);
    CHECK(m.alpha_s == doctest::Approx(truth.alpha_s).epsilon(1e-6));
    CHECK(m.bus_bytes_per_s == doctest::Approx(truth.bus_bytes_per_s).epsilon(1e-9));
  }
  CHECK_THROWS_WITH_AS(fit_allreduce({{1e6, 1.0}}, 2), doctest::Contains("need at least 2"), kiln::Error);
  CHECK_THROWS_WITH_AS(fit_allreduce({{1e6, 1.0}, {2e6, 1.0}}, 1), doctest::Contains("n >= 2"), kiln::Error);
}

TEST_CASE("fit_ring recovers α and B of reduce-scatter and all-gather (n-1 steps, not 2(n-1))") {
  const AlphaBeta truth{30e-6, 2e9};
  for (Collective c : {Collective::kReduceScatter, Collective::kAllGather}) {
    CHECK(parse_collective(collective_name(c)) == c);
    for (int n : {2, 4}) {
      std::vector<std::pair<double, double>> pts;
      for (double bytes = 4096; bytes <= 64e6; bytes *= 4) pts.push_back({bytes, collective_seconds(c, truth, n, bytes)});
      AlphaBeta m = fit_ring(c, pts, n);
      CHECK(m.alpha_s == doctest::Approx(truth.alpha_s).epsilon(1e-6));
      CHECK(m.bus_bytes_per_s == doctest::Approx(truth.bus_bytes_per_s).epsilon(1e-9));
      // Read as an all-reduce, the same timings mean half the latency per step and twice the bandwidth.
      CHECK(fit_allreduce(pts, n).bus_bytes_per_s == doctest::Approx(2 * truth.bus_bytes_per_s).epsilon(1e-9));
    }
  }
  CHECK_THROWS_WITH_AS(parse_collective("broadcast"), doctest::Contains("'broadcast' is none of"), kiln::Error);
}

TEST_CASE("ring formulas: all-reduce is reduce-scatter plus all-gather") {
  const AlphaBeta m{10e-6, 1e9};
  CHECK(allreduce_seconds(m, 4, 8e6) == doctest::Approx(6 * 10e-6 + 1.5 * 8e6 / 1e9));
  CHECK(reduce_scatter_seconds(m, 4, 8e6) + allgather_seconds(m, 4, 8e6) ==
        doctest::Approx(allreduce_seconds(m, 4, 8e6)));
  CHECK(allreduce_seconds(m, 1, 8e6) == 0);
}

TEST_CASE("hierarchical all-reduce: flat within a node, three phases across nodes") {
  const AlphaBeta intra{1e-6, 100e9}, inter{10e-6, 10e9};
  CHECK(hierarchical_allreduce_seconds(intra, inter, 8, 4, 1e8) == doctest::Approx(allreduce_seconds(intra, 4, 1e8)));
  // 16 ranks in nodes of 8: 7/8 of 100 MB each way over NVLink, 12.5 MB all-reduced by 2 nodes.
  const double want = 2 * (7e-6 + 7.0 / 8 * 1e8 / 100e9) + 2 * 10e-6 + 12.5e6 / 10e9;
  CHECK(hierarchical_allreduce_seconds(intra, inter, 8, 16, 1e8) == doctest::Approx(want));
  CHECK_THROWS_WITH_AS(hierarchical_allreduce_seconds(intra, inter, 8, 12, 1e8), doctest::Contains("nodes of 8"),
                       kiln::Error);
}

TEST_CASE("predict_step: hidden, partly exposed and serialised bucket communication") {
  StepProfile p{0.010, 0.020, 0.002, {{0.005, 1e6}, {0.020, 1e6}}};
  const AlphaBeta link{0, 1e9};  // 2 ranks: each 1 MB bucket takes 1 ms
  StepPrediction s = predict_step(p, link, 2);
  CHECK(s.comm_s == doctest::Approx(0.002));
  CHECK(s.exposed_s == doctest::Approx(0.001));  // the last bucket starts when backward ends
  CHECK(s.step_s == doctest::Approx(0.033));
  CHECK(s.efficiency == doctest::Approx(0.032 / 0.033));
  // A slow link: bucket 1 runs 5-15 ms; bucket 2, ready at 12 ms, waits for it (15-25 ms): 5 ms
  // exposed after the 20 ms backward.
  StepProfile q{0.010, 0.020, 0.002, {{0.005, 1e6}, {0.012, 1e6}}};
  StepPrediction slow = predict_step(q, AlphaBeta{0, 1e8}, 2);
  CHECK(slow.exposed_s == doctest::Approx(0.005));
  // Ranks sharing cores stretch the compute and the ready times.
  StepPrediction shared = predict_step(p, link, 2, 2.0);
  CHECK(shared.step_s == doctest::Approx(0.064 + 0.001));
}

TEST_CASE("predict_zero_step_with: reduce-scatter overlapped, 1/n of the optimizer, all-gather after") {
  StepProfile p{0.010, 0.020, 0.002, {{0.005, 1e6}, {0.020, 1e6}}};
  const AlphaBeta link{0, 1e9};
  auto rs = [&](double b) { return reduce_scatter_seconds(link, 2, b); };  // 0.5 ms per 1 MB bucket on 2 ranks
  auto ag = [&](double b) { return allgather_seconds(link, 2, b); };
  StepPrediction z = predict_zero_step_with(p, rs, ag, 2);
  // Bucket 2's reduce-scatter ends 0.5 ms after backward; the optimizer steps half the
  // parameters (1 ms); then 2 x 0.5 ms of all-gather.
  CHECK(z.exposed_s == doctest::Approx(0.0005));
  CHECK(z.comm_s == doctest::Approx(0.002));
  CHECK(z.step_s == doctest::Approx(0.010 + 0.020 + 0.001 + 0.0005 + 0.001));
  CHECK(z.efficiency == doctest::Approx(0.032 / 0.0325));
  // Against DDP on the same link (all-reduce: 1 ms per bucket, 1 ms exposed): the saved optimizer
  // time and the halved exposure do not pay for the all-gather here.
  CHECK(predict_step(p, link, 2).step_s == doctest::Approx(0.033));
  // One rank: no communication, the whole optimizer; the DDP step.
  auto none = [](double) { return 0.0; };
  CHECK(predict_zero_step_with(p, none, none, 1).step_s == doctest::Approx(predict_step(p, link, 1).step_s));
  // Shared cores stretch the compute, the optimizer's share included.
  CHECK(predict_zero_step_with(p, rs, ag, 2, 2.0).step_s == doctest::Approx(2 * 0.031 + 0.0005 + 0.001));
  CHECK_THROWS_AS(predict_zero_step_with(p, rs, ag, 0), kiln::Error);
}

TEST_CASE("tensor-parallel and FSDP communication: 4 all-reduces per layer; 2 all-gathers and a reduce-scatter per unit") {
  const AlphaBeta link{0, 1e9};
  // 2 ranks: an all-reduce of 1 MB moves 2 x 1/2 MB at 1 GB/s = 1 ms; 3 layers x 4 = 12 ms.
  CHECK(tp_comm_seconds(link, 2, 3, 1e6) == doctest::Approx(12e-3));
  CHECK(tp_comm_seconds(link, 1, 3, 1e6) == 0);
  // 4 ranks, 2 units of 4 MB: each gather or reduce-scatter 3 α + 3/4 x 4 MB / 1 GB/s = 3.003 ms.
  CHECK(fsdp_comm_seconds({1e-6, 1e9}, 4, 2, 8e6, 8e6) == doctest::Approx(2 * 3 * 3.003e-3));
  CHECK_THROWS_WITH_AS(fsdp_comm_seconds(link, 4, 0, 8e6, 8e6), doctest::Contains("0 units"), kiln::Error);
}

TEST_CASE("predict_sharded_step: DDP, FSDP across nodes and tensor parallel within one, by hand") {
  // 1e9 parameters, 10 layers of 1000, 1000 tokens: 6.12e9 FLOPs per token; 1000 tokens per GPU
  // at 1 PFLOP/s x 0.5: 12.24 ms of compute. bf16 (2 bytes): 2 GB of parameters.
  const TransformerShape m{1e9, 10, 1000, 1000};
  CHECK(m.flops_per_token() == doctest::Approx(6.12e9));
  const ClusterSpec c{1e15, 0.5, 8, {0, 100e9}, {0, 10e9}};
  // DDP on 16 (two nodes: the network): all-reduce 2 x 15/16 x 2 GB / 10 GB/s = 375 ms, backward
  // hides 8.16 ms of it, the last layer's 37.5 ms is exposed.
  ShardedStepPrediction ddp = predict_sharded_step(m, c, {1, 16, false}, 1000, 2);
  CHECK(ddp.compute_s == doctest::Approx(12.24e-3));
  CHECK(ddp.dp_comm_s == doctest::Approx(0.375));
  CHECK(ddp.exposed_s == doctest::Approx(0.375 - 8.16e-3 + 0.0375));
  CHECK(ddp.step_s == doctest::Approx(0.41658));
  CHECK(ddp.mfu == doctest::Approx(6.12e12 / (0.41658 * 1e15)));
  CHECK(ddp.state_bytes == doctest::Approx(16e9));
  // FSDP on 16: per layer two gathers and a reduce-scatter of 200 MB, 18.75 ms each: 562.5 ms,
  // compute hides 12.24, the first gather and the last reduce-scatter (37.5 ms) are exposed.
  ShardedStepPrediction fsdp = predict_sharded_step(m, c, {1, 16, true}, 1000, 2);
  CHECK(fsdp.dp_comm_s == doctest::Approx(0.5625));
  CHECK(fsdp.step_s == doctest::Approx(0.6));
  CHECK(fsdp.mfu == doctest::Approx(0.0102));
  CHECK(fsdp.state_bytes == doctest::Approx(1e9));
  // TP 8 in one node: 4 x 10 all-reduces of 8 x 1000 x 1000 x 2 bytes over NVLink (0.28 ms each).
  ShardedStepPrediction tp = predict_sharded_step(m, c, {8, 1, false}, 1000, 2);
  CHECK(tp.tp_s == doctest::Approx(0.0112));
  CHECK(tp.exposed_s == 0);
  CHECK(tp.step_s == doctest::Approx(0.02344));
  CHECK(tp.state_bytes == doctest::Approx(2e9));
  CHECK_THROWS_WITH_AS(predict_sharded_step(m, c, {16, 1, false}, 1000, 2), doctest::Contains("beyond a node of 8"),
                       kiln::Error);
}

}  // namespace
}  // namespace kiln::bench
