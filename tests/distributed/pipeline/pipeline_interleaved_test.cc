// Interleaved 1F1B (virtual stages) on 2 and 3 real processes: each rank holds several
// non-adjacent chunks of the model, and training still equals one process on the whole batch; the
// schedule's action lists, its bubble on equal stages, inference through the chunks, a merged
// checkpoint, and the configuration errors it adds.
#include <doctest/doctest.h>

#include <filesystem>
#include <set>

#include "autograd/autograd.h"
#include "distributed/backend/init.h"
#include "distributed/pipeline/pipeline.h"
#include "train/pipeline_checkpoint.h"
#include "optim/optim.h"
#include "tests/distributed/pipeline/pipeline_helpers.h"

namespace kiln {
namespace {

using dist::PipelineAction;
using dist::Schedule;
using test::expect;

constexpr auto ce = test::pipeline_ce;

TEST_CASE("interleaved actions: every chunk and micro-batch once each way, forward first; Megatron's order") {
  // 2 stages x 2 chunks, 4 micro-batches, stage 0: warm-up 2*(p-1-s) + (v-1)*p = 4 forwards
  // (micro-batches 0 and 1 through chunk 0, then through chunk 1), then alternating, backwards
  // starting from the last chunk.
  auto a = dist::schedule_actions(Schedule::kInterleaved1F1B, 0, 2, 4, 2);
  std::vector<PipelineAction> want = {{true, 0, 0},  {true, 1, 0},  {true, 0, 1},  {true, 1, 1},
                                      {true, 2, 0},  {false, 0, 1}, {true, 3, 0},  {false, 1, 1},
                                      {true, 2, 1},  {false, 0, 0}, {true, 3, 1},  {false, 1, 0},
                                      {false, 2, 1}, {false, 3, 1}, {false, 2, 0}, {false, 3, 0}};
  CHECK(a == want);
  for (int p = 1; p <= 4; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 4 * p; m += p)
        for (int s = 0; s < p; ++s) {
          auto acts = dist::schedule_actions(Schedule::kInterleaved1F1B, s, p, m, v);
          REQUIRE(acts.size() == static_cast<size_t>(2 * m * v));
          std::set<std::pair<int, int>> fwd, bwd;
          for (const auto& x : acts) {
            const std::pair<int, int> key{x.chunk, x.micro};
            if (x.forward) {
              CHECK(fwd.insert(key).second);
            } else {
              CHECK(fwd.count(key) == 1);  // its forward came first
              CHECK(bwd.insert(key).second);
            }
          }
          CHECK(fwd.size() == static_cast<size_t>(m * v));
          // Far fewer than GPipe's m * v at large m: bounded by the warm-up, not by m.
          CHECK(dist::peak_live(acts) <= std::min(m * v, 2 * (p - 1 - s) + (v - 1) * p + 1));
        }
}

TEST_CASE("interleaved bubble on equal chunks is (p-1)/(v*m+p-1): the step is (v*m+p-1)(F+B)") {
  for (int p = 1; p <= 4; ++p)
    for (int v = 2; v <= 4; ++v)
      for (int m = p; m <= 8 * p; m *= 2) {
        // Each chunk costs F = 1 forward and B = 2 backward: 1/v of a one-chunk stage's work each.
        const double t = dist::simulated_step_time(Schedule::kInterleaved1F1B, m, std::vector<double>(p * v, 1.0),
                                                   std::vector<double>(p * v, 2.0), v);
        CHECK(t == doctest::Approx(3.0 * (v * m + p - 1)));
        const double busy = 3.0 * m * v;
        CHECK(1 - busy / t == doctest::Approx(static_cast<double>(p - 1) / (v * m + p - 1)));
      }
  CHECK(dist::parse_schedule("Interleaved") == Schedule::kInterleaved1F1B);
  CHECK_THROWS_WITH(dist::check_schedule(Schedule::kInterleaved1F1B, 2, 3, 2),
                    doctest::Contains("3 micro-batches do not split into rounds of 2"));
  CHECK_THROWS_WITH(dist::check_schedule(Schedule::kInterleaved1F1B, 2, 4, 1),
                    doctest::Contains("needs at least 2 virtual stages"));
  CHECK_THROWS_WITH(dist::check_schedule(Schedule::k1F1B, 2, 4, 2),
                    doctest::Contains("2 virtual stages per rank need the interleaved schedule"));
  CHECK_THROWS_WITH(dist::simulated_step_time(Schedule::kInterleaved1F1B, 2, {1, 1, 1}, {1, 1, 1}, 2),
                    doctest::Contains("3 forward and 3 backward costs for 2 micro-batches and 2 chunks"));
}

dist::PipelineOptions interleaved(int m, int v) {
  dist::PipelineOptions o;
  o.micro_batches = m;
  o.schedule = Schedule::kInterleaved1F1B;
  o.virtual_stages = v;
  return o;
}

// Steps through the pipeline and through the unsplit model; parameters, losses, the activation
// count against the schedule's, then inference through the chunks.
void equivalence(int rank, int world, int v, const std::vector<int>& micro, DType dt, double tol) {
  auto pg = dist::init_process_group();
  for (int m : micro) {
    const std::string what = fmt::format("p={} v={} m={} {}", world, v, m, dt);
    dist::Pipeline pipe(test::pipeline_mlp(7, dt), pg, interleaved(m, v));
    expect(pipe.num_chunks() == v && static_cast<int>(pipe.boundaries().size()) == world * v + 1,
           "{}: {} chunks, boundaries {}", what, pipe.num_chunks(), pipe.boundaries().size());
    auto reference = test::pipeline_mlp(7, dt);
    test::train_beside(pipe, *reference, 4, 12, dt, tol, what);
    test::expect_stage_matches(pipe, *reference, tol, what);
    const int want = dist::peak_live(dist::schedule_actions(Schedule::kInterleaved1F1B, rank, world, m, v));
    expect(pipe.stats().peak_activations == want && pipe.stats().live_activations == 0,
           "{}: stage {} kept {} chunk activations alive at most (schedule: {}), {} left", what, rank,
           pipe.stats().peak_activations, want, pipe.stats().live_activations);
    test::expect_action_times(pipe, Schedule::kInterleaved1F1B, rank, world, m, v, what);
    test::PipeBatch b = test::pipeline_batch(9, 5, dt);  // any batch size: no micro-batches
    Tensor out = pipe.forward(pipe.is_first() ? b.x : Tensor());
    if (pipe.is_last()) {
      NoGradGuard no_grad;
      double d = (out - reference->forward(b.x)).abs().max().item<double>();
      expect(d <= tol, "{}: inference differs from the unsplit model by {}", what, d);
    }
  }
}

TEST_CASE("interleaved on 2 stages x 2 chunks equals one process, m = 2, 4, 6 (f32 and f64)") {
  test::require_all_ok(test::run_ranks(2, [](int r, int w) { equivalence(r, w, 2, {2, 4, 6}, kFloat32, 1e-5); }, 120,
                                       "il2x2"));
  test::require_all_ok(test::run_ranks(2, [](int r, int w) { equivalence(r, w, 2, {2, 4}, kFloat64, 1e-12); }, 120,
                                       "il2x2d"));
}

TEST_CASE("interleaved on 2 stages x 3 chunks and 3 stages x 2 chunks equals one process") {
  test::require_all_ok(test::run_ranks(2, [](int r, int w) { equivalence(r, w, 3, {2, 4}, kFloat64, 1e-12); }, 120,
                                       "il2x3"));
  test::require_all_ok(test::run_ranks(3, [](int r, int w) { equivalence(r, w, 2, {3, 6}, kFloat32, 1e-5); }, 120,
                                       "il3x2"));
}

TEST_CASE("interleaved: a merged checkpoint holds the unsplit model's names and loads into a 1F1B split") {
  const std::string path = (std::filesystem::temp_directory_path() /
                            fmt::format("kiln_interleaved_{}.ckpt", static_cast<long>(getpid())))
                               .string();
  test::require_all_ok(test::run_ranks(2, [&](int rank, int) {
    auto pg = dist::init_process_group();
    dist::Pipeline pipe(test::pipeline_mlp(7), pg, interleaved(2, 2));
    // 7 layers in 4 virtual stages: rank 0 holds stages 0 and 2, rank 1 stages 1 and 3.
    const auto& b = pipe.boundaries();
    std::vector<int> mine;
    for (int c = 0; c < 2; ++c)
      for (int i = b[c * 2 + rank]; i < b[c * 2 + rank + 1]; ++i) mine.push_back(i);
    expect(static_cast<int>(pipe.stage_module().size()) == static_cast<int>(mine.size()), "rank {}: {} layers", rank,
           pipe.stage_module().size());
    for (size_t i = 0; i < mine.size(); ++i) {
      expect(pipe.global_name(fmt::format("{}.weight", i)) == fmt::format("{}.weight", mine[i]),
             "rank {}: local layer {} is '{}'", rank, i, pipe.global_name(fmt::format("{}.weight", i)));
      expect(pipe.local_name(fmt::format("{}.bias", mine[i])) == fmt::format("{}.bias", i), "rank {}: layer {}", rank,
             mine[i]);
    }
    optim::SGD opt(pipe.parameters(), optim::SGDOptions(0.1));
    test::PipeBatch batch = test::pipeline_batch(0, 8);
    opt.zero_grad();
    pipe.train_step(pipe.is_first() ? batch.x : Tensor(), pipe.is_last() ? batch.y : Tensor(), ce);
    opt.step();
    dist::save_merged_checkpoint(pipe, path, train::TrainingState{});
    pg->barrier()->wait();
    dist::PipelineOptions plain;
    plain.micro_batches = 2;
    dist::Pipeline other(test::pipeline_mlp(99), pg, plain);
    dist::load_merged_checkpoint(other, path);
    auto unsplit = test::pipeline_mlp(99);
    train::load_checkpoint(path, *unsplit, nullptr);
    test::expect_stage_matches(other, *unsplit, 0, "merged from interleaved into 1f1b");
    test::expect_stage_matches(pipe, *unsplit, 0, "interleaved against its merged file");
    pg->barrier()->wait();
  }, 120, "il_ckpt"));
  std::filesystem::remove(path);
}

// Runs `body` on 2 ranks, expecting each to fail with `part` in its stderr.
void expect_failure(const std::string& name, const std::function<void(std::shared_ptr<dist::ProcessGroup>)>& body,
                    const std::vector<std::string>& part) {
  auto results = test::run_ranks(2, [&](int, int) {
    auto pg = dist::init_process_group();
    pg->barrier()->wait();  // rank 0 serves the store: let every rank finish joining before it exits
    body(pg);
  }, 60, name);
  for (size_t r = 0; r < results.size(); ++r) {
    INFO(results[r].stderr_text);
    CHECK(results[r].exit_code == 1);
    CHECK(results[r].stderr_text.find(part[r]) != std::string::npos);
  }
}

TEST_CASE("interleaved configuration errors name the counts on every rank") {
  auto build = [](dist::PipelineOptions o) {
    return [o](std::shared_ptr<dist::ProcessGroup> pg) { dist::Pipeline pipe(test::pipeline_mlp(7), pg, o); };
  };
  const std::string m3 = "Pipeline: pipeline schedule interleaved: 3 micro-batches do not split into rounds of 2";
  expect_failure("il_m", build(interleaved(3, 2)), {m3, m3});
  const std::string layers = "Pipeline: 8 virtual stages (2 stages x 4 per rank) but the model has only 7 layers";
  expect_failure("il_layers", build(interleaved(2, 4)), {layers, layers});
  dist::PipelineOptions gpipe = interleaved(2, 2);
  gpipe.schedule = Schedule::kGPipe;
  const std::string chunks = "pipeline schedule gpipe: 2 virtual stages per rank need the interleaved schedule";
  expect_failure("il_chunks", build(gpipe), {chunks, chunks});
  dist::PipelineOptions bounds = interleaved(2, 2);
  bounds.boundaries = {0, 3, 7};
  const std::string b = "boundaries [0, 3, 7] do not split 7 layers into 4 virtual stages (need 5";
  expect_failure("il_bounds", build(bounds), {b, b});
}

TEST_CASE("interleaved: a chunk that does not fit the output coming round from the last rank stops every rank") {
  // Virtual stage 2 (rank 0's second chunk) takes 8 features; stage 1 (rank 1) sends 16.
  const std::string msg = "Pipeline: stage 2 (rank 0, chunk 1, layers [2, 3)) cannot run on stage 1's output [4, 16] f32";
  expect_failure("il_shape", [](std::shared_ptr<dist::ProcessGroup> pg) {
    auto bad = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(8, 16),
        std::make_shared<nn::Linear>(16, 5)});
    dist::PipelineOptions o = interleaved(2, 2);
    o.boundaries = {0, 1, 2, 3, 4};
    dist::Pipeline pipe(bad, pg, o);
    test::PipeBatch b = test::pipeline_batch(0, 8);
    pipe.train_step(b.x, b.y, ce);
  }, {msg, "stage 1 (rank 1) stops because stage 0 failed the first-step check: " + msg});
}

}  // namespace
}  // namespace kiln
