// Pipeline parallel on 2, 3 and 4 real processes: GPipe and 1F1B with 1 to 8 micro-batches train
// exactly as one process on the whole batch; 1F1B keeps at most p micro-batches' activations per
// stage while GPipe keeps all m; configuration errors stop every rank with a message naming the
// stage and the shapes instead of hanging.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>

#include "autograd/autograd.h"
#include "distributed/backend/init.h"
#include "distributed/pipeline/pipeline.h"
#include "optim/optim.h"
#include "tests/distributed/pipeline/pipeline_helpers.h"

namespace kiln {
namespace {

using test::expect;

constexpr auto ce = test::pipeline_ce;

// Trains `steps` SGD-with-momentum steps through the pipeline and through the unsplit model on the
// whole batch, for each schedule and micro-batch count, and compares parameters and losses.
void equivalence(int rank, int world, DType dt, double tol) {
  auto pg = dist::init_process_group();
  for (dist::Schedule sched : {dist::Schedule::kGPipe, dist::Schedule::k1F1B}) {
    for (int m : {1, 2, 4, 8}) {
      std::string what = fmt::format("p={} {} m={} {}", world, dist::schedule_name(sched), m, dt);
      dist::PipelineOptions o;
      o.micro_batches = m;
      o.schedule = sched;
      dist::Pipeline pipe(test::pipeline_mlp(7, dt), pg, o);
      auto reference = test::pipeline_mlp(7, dt);
      test::train_beside(pipe, *reference, 4, 16, dt, tol, what);
      test::expect_stage_matches(pipe, *reference, tol, what);
      int expected_peak = sched == dist::Schedule::kGPipe ? m : std::min(m, world - rank);
      expect(pipe.stats().peak_activations == expected_peak, "{}: stage {} kept {} micro-batches alive, expected {}",
             what, rank, pipe.stats().peak_activations, expected_peak);
      expect(pipe.stats().live_activations == 0, "{}: {} activations left after the step", what,
             pipe.stats().live_activations);
      test::expect_action_times(pipe, sched, rank, world, m, 1, what);
    }
  }
}

TEST_CASE("schedules: 1F1B warms up p-1-s forwards and keeps at most p-s alive; GPipe keeps m") {
  using dist::PipelineAction;
  auto a = dist::schedule_actions(dist::Schedule::k1F1B, 0, 3, 4);
  std::vector<PipelineAction> want = {{true, 0},  {true, 1},  {true, 2},  {false, 0},
                                      {true, 3},  {false, 1}, {false, 2}, {false, 3}};
  CHECK(a == want);
  for (int p = 1; p <= 4; ++p)
    for (int s = 0; s < p; ++s)
      for (int m = 1; m <= 16; ++m) {
        auto f = dist::schedule_actions(dist::Schedule::k1F1B, s, p, m);
        auto g = dist::schedule_actions(dist::Schedule::kGPipe, s, p, m);
        CHECK(f.size() == static_cast<size_t>(2 * m));
        CHECK(dist::peak_live(f) == std::min(m, p - s));
        CHECK(dist::peak_live(g) == m);
      }
  CHECK(dist::parse_schedule("1F1B") == dist::Schedule::k1F1B);
  CHECK_THROWS_WITH(dist::parse_schedule("zigzag"), doctest::Contains("'zigzag' is unknown (gpipe, 1f1b or interleaved)"));
}

TEST_CASE("simulated step time: (m+p-1)(F+B) for equal stages; the slowest stage paces unequal ones") {
  for (auto sched : {dist::Schedule::kGPipe, dist::Schedule::k1F1B})
    for (int p = 1; p <= 4; ++p)
      for (int m = 1; m <= 16; m *= 2) {
        const double t = dist::simulated_step_time(sched, m, std::vector<double>(p, 1.0), std::vector<double>(p, 2.0));
        CHECK(t == doctest::Approx(3.0 * (m + p - 1)));
      }
  // Stage 1 twice as slow, GPipe m = 4: its forwards end at 3, 5, 7, 9, its backwards at 13, 17,
  // 21, 25, and stage 0's last backward at 25 + 2.
  CHECK(dist::simulated_step_time(dist::Schedule::kGPipe, 4, {1, 2}, {2, 4}) == doctest::Approx(27.0));
  CHECK_THROWS_WITH(dist::simulated_step_time(dist::Schedule::kGPipe, 4, {1, 2}, {2}),
                    doctest::Contains("2 forward and 1 backward costs"));
}

TEST_CASE("replayed step time: each action's own cost, and what waits on a slow one waits") {
  // 1F1B, p = 2, m = 2: stage 0 runs F0 F1 B0 B1, stage 1 F0 B0 F1 B1. Forwards 1, backwards 2:
  // (m+p-1)(F+B) = 9, as simulated_step_time gives.
  const std::vector<std::vector<double>> even = {{1, 1, 2, 2}, {1, 2, 1, 2}};
  CHECK(dist::replayed_step_time(dist::Schedule::k1F1B, 2, even) == doctest::Approx(9.0));
  CHECK(dist::simulated_step_time(dist::Schedule::k1F1B, 2, {1, 1}, {2, 2}) == doctest::Approx(9.0));
  // Stage 1's first forward takes 4: its F0 ends at 5 and B0 at 7, stage 0's B0 at 9; stage 1's F1
  // ends at 8 and B1 at 10, so stage 0's B1 runs 10-12.
  CHECK(dist::replayed_step_time(dist::Schedule::k1F1B, 2, {{1, 1, 2, 2}, {4, 2, 1, 2}}) == doctest::Approx(12.0));
  // A slow last action delays nothing but itself.
  CHECK(dist::replayed_step_time(dist::Schedule::k1F1B, 2, {{1, 1, 2, 5}, {1, 2, 1, 2}}) == doctest::Approx(12.0));
  CHECK_THROWS_WITH(dist::replayed_step_time(dist::Schedule::k1F1B, 2, {{1, 1, 2, 2}, {1, 2, 1}}),
                    doctest::Contains("stage 1 has 3 action costs, its 1f1b schedule of 2 micro-batches 4 actions"));
}

TEST_CASE("balanced boundaries minimise the largest stage's parameter count") {
  CHECK(dist::balanced_boundaries({10, 0, 10, 0, 10, 0, 10}, 2) == std::vector<int>{0, 3, 7});
  CHECK(dist::balanced_boundaries({100, 1, 1, 1, 100}, 3) == std::vector<int>{0, 1, 4, 5});
  CHECK(dist::balanced_boundaries({5, 5, 5}, 3) == std::vector<int>{0, 1, 2, 3});
}

TEST_CASE("pipeline on 2 stages equals one process, GPipe and 1F1B, m = 1, 2, 4, 8 (f32 and f64)") {
  test::require_all_ok(test::run_ranks(2, [](int r, int w) { equivalence(r, w, kFloat32, 1e-5); }, 120, "pipe2"));
  test::require_all_ok(test::run_ranks(2, [](int r, int w) { equivalence(r, w, kFloat64, 1e-12); }, 120, "pipe2d"));
}

TEST_CASE("pipeline on 3 stages equals one process, GPipe and 1F1B, m = 1, 2, 4, 8") {
  test::require_all_ok(test::run_ranks(3, [](int r, int w) { equivalence(r, w, kFloat32, 1e-5); }, 120, "pipe3"));
}

TEST_CASE("pipeline on 4 stages equals one process, GPipe and 1F1B, m = 1, 2, 4, 8 (f64)") {
  test::require_all_ok(test::run_ranks(4, [](int r, int w) { equivalence(r, w, kFloat64, 1e-12); }, 120, "pipe4"));
}

// Runs `body` on `n` ranks, expecting every rank to fail; returns their stderr.
std::vector<std::string> failing(int n, const std::function<void(int, int)>& body, const std::string& name) {
  auto results = test::run_ranks(n, body, 60, name);
  std::vector<std::string> out;
  for (auto& r : results) {
    INFO(r.stderr_text);
    CHECK(r.exit_code == 1);
    out.push_back(r.stderr_text);
  }
  return out;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_CASE("more stages than layers, or bad boundaries, is an error on every rank") {
  auto errs = failing(3, [](int, int) {
    auto pg = dist::init_process_group();
    pg->barrier()->wait();  // rank 0 serves the store: let every rank finish joining before it exits
    auto two = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(12, 4), std::make_shared<nn::Linear>(4, 5)});
    dist::Pipeline pipe(two, pg);
  }, "pipe_too_many");
  for (auto& e : errs) CHECK_MESSAGE(has(e, "Pipeline: 3 stages but the model has only 2 layers"), e);
  errs = failing(2, [](int, int) {
    auto pg = dist::init_process_group();
    pg->barrier()->wait();
    dist::PipelineOptions o;
    o.boundaries = {0, 7, 7};
    dist::Pipeline pipe(test::pipeline_mlp(1), pg, o);
  }, "pipe_bad_bounds");
  for (auto& e : errs) CHECK_MESSAGE(has(e, "Pipeline: boundaries [0, 7, 7] do not split 7 layers into 2 stages"), e);
}

TEST_CASE("a batch that does not split into m micro-batches stops every stage, naming the shape") {
  auto errs = failing(3, [](int, int) {
    auto pg = dist::init_process_group();
    dist::PipelineOptions o;
    o.micro_batches = 4;
    dist::Pipeline pipe(test::pipeline_mlp(1), pg, o);
    test::PipeBatch b = test::pipeline_batch(0, 10);
    pipe.train_step(b.x, b.y, ce);
  }, "pipe_split");
  const std::string msg = "the batch's input [10, 12] does not split into 4 micro-batches (10 rows; stage 0";
  CHECK_MESSAGE(has(errs[0], msg), errs[0]);
  const std::string stops = "stage 1 (rank 1, layers [1, 3)) stops because stage 0 failed the first-step check: ";
  CHECK_MESSAGE(has(errs[1], stops + "Pipeline: " + msg), errs[1]);
  CHECK_MESSAGE(has(errs[2], "the batch's target [10] does not split into 4 micro-batches (10 rows; stage 2, rank 2)"),
                errs[2]);
}

TEST_CASE("a stage whose input does not fit the previous stage's output stops every stage, naming both") {
  auto errs = failing(2, [](int, int) {
    auto pg = dist::init_process_group();
    auto bad = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(8, 5)});
    dist::PipelineOptions o;
    o.micro_batches = 2;
    o.boundaries = {0, 2, 3};
    dist::Pipeline pipe(bad, pg, o);
    test::PipeBatch b = test::pipeline_batch(0, 8);
    pipe.train_step(b.x, b.y, ce);
  }, "pipe_shape");
  const std::string msg = "Pipeline: stage 1 (rank 1, layers [2, 3)) cannot run on stage 0's output [4, 16] f32";
  CHECK_MESSAGE(has(errs[1], msg), errs[1]);
  CHECK_MESSAGE(
      has(errs[0], "stage 0 (rank 0, layers [0, 2)) stops because stage 1 failed the first-step check: " + msg),
      errs[0]);
}

TEST_CASE("fewer micro-batches than stages trains, with a warning about the bubble") {
  auto results = test::run_ranks(2, [](int, int) {
    auto pg = dist::init_process_group();
    dist::Pipeline pipe(test::pipeline_mlp(1), pg);  // m = 1
    test::PipeBatch b = test::pipeline_batch(0, 8);
    pipe.train_step(b.x, b.y, ce);
  }, 60, "pipe_warn");
  test::require_all_ok(results);
  CHECK(has(results[0].stderr_text, "Pipeline warning: 1 micro-batches for 2 stages: the bubble, (p-1)/(m+p-1) = 50%"));
  CHECK(!has(results[1].stderr_text, "warning"));
}

TEST_CASE("a batch of another shape renegotiates (still equal to one process); a later bad batch stops all") {
  auto results = test::run_ranks(3, [](int, int) {
    auto pg = dist::init_process_group();
    dist::PipelineOptions o;
    o.micro_batches = 4;
    dist::Pipeline pipe(test::pipeline_mlp(7), pg, o);
    auto reference = test::pipeline_mlp(7);
    optim::SGD opt(pipe.parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
    optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
    int step = 0;
    for (int64_t rows : {16, 16, 8, 16}) {  // an epoch's smaller last batch, then the next epoch
      test::PipeBatch b = test::pipeline_batch(step++, rows);
      opt.zero_grad();
      pipe.train_step(b.x, b.y, ce);
      opt.step();
      ref_opt.zero_grad();
      ce(reference->forward(b.x), b.y).backward();
      ref_opt.step();
    }
    test::expect_stage_matches(pipe, *reference, 1e-5, "changing batch shapes");
    test::PipeBatch bad = test::pipeline_batch(9, 6);
    pipe.train_step(bad.x, bad.y, ce);
  }, 60, "pipe_reshape");
  for (auto& r : results) {
    INFO(r.stderr_text);
    CHECK(r.exit_code == 1);
    CHECK(has(r.stderr_text, "does not split into 4 micro-batches (6 rows"));  // the last stage names its target
  }
}

TEST_CASE("a stage that dies mid-schedule stops the others within the timeout, naming it") {
  auto t0 = std::chrono::steady_clock::now();
  auto results = test::run_ranks(3, [](int rank, int) {
    auto pg = dist::init_process_group({.timeout = std::chrono::seconds(5)});
    dist::PipelineOptions o;
    o.micro_batches = 4;
    dist::Pipeline pipe(test::pipeline_mlp(1), pg, o);
    int calls = 0;
    auto dying = [&](const Tensor& out, const Tensor& y) {
      if (++calls == 6) std::_Exit(3);  // the last stage dies in its second step
      return ce(out, y);
    };
    for (int step = 0; step < 3; ++step) {
      test::PipeBatch b = test::pipeline_batch(step, 8);
      pipe.train_step(b.x, b.y, dying);
    }
    (void)rank;
  }, 60, "pipe_dies");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("rank 1: exit " << results[1].exit_code << ", signal " << results[1].signal);
  CHECK(results[2].exit_code == 3);
  CHECK(results[1].exit_code == 1);
  CHECK_MESSAGE(has(results[1].stderr_text, "Pipeline: stage 1 (rank 1) lost stage 2: receiving the gradient of "
                                            "micro-batch"),
                results[1].stderr_text);
  CHECK(results[0].exit_code == 1);
  CHECK_MESSAGE(has(results[0].stderr_text, "Pipeline: stage 0 (rank 0) lost stage "), results[0].stderr_text);
  CHECK(seconds < 20);
}

}  // namespace
}  // namespace kiln
