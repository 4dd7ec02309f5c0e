// Stage boundaries by cost (distributed/pipeline/pipeline_balance.h): the min-max partition, per-layer
// forward timing, and a split balanced by measured time that every rank agrees on and that
// differs from the parameter-count split where time and parameters disagree.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "distributed/backend/init.h"
#include "distributed/pipeline/pipeline_balance.h"
#include "tests/distributed/pipeline/pipeline_helpers.h"

namespace kiln {
namespace {

using test::expect;

/// A layer without parameters whose forward takes `ms` milliseconds: time that a parameter count
/// cannot see. Sleeping keeps the test robust on a loaded machine (a sleep only gets longer).
struct Sleep : nn::Module {
  int ms;
  explicit Sleep(int m) : nn::Module("Sleep"), ms(m) {}
  Tensor forward(const Tensor& x) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return x;
  }
};

/// Four small Linear layers (all the parameters), then two slow parameter-free layers.
std::shared_ptr<nn::Sequential> slow_tail_model() {
  manual_seed(3);
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(12, 12), std::make_shared<nn::Linear>(12, 12), std::make_shared<nn::Linear>(12, 12),
      std::make_shared<nn::Linear>(12, 12), std::make_shared<Sleep>(20), std::make_shared<Sleep>(20)});
}

TEST_CASE("balanced_boundaries_by_cost minimises the largest stage's cost") {
  CHECK(dist::balanced_boundaries_by_cost({1, 1, 1, 1, 4}, 2) == std::vector<int>{0, 4, 5});
  CHECK(dist::balanced_boundaries_by_cost({0.5, 0.25, 0.25, 3.0}, 2) == std::vector<int>{0, 3, 4});
  CHECK(dist::balanced_boundaries_by_cost({2, 2, 2}, 3) == std::vector<int>{0, 1, 2, 3});
  CHECK_THROWS_WITH(dist::balanced_boundaries_by_cost({1, 2}, 3), doctest::Contains("3 stages for 2 layers"));
}

TEST_CASE("layer_forward_seconds times each layer on the sample") {
  auto model = slow_tail_model();
  std::vector<double> t = dist::layer_forward_seconds(*model, randn({4, 12}), 3);
  REQUIRE(t.size() == 6);
  for (int i = 0; i < 4; ++i) CHECK(t[i] < 0.01);  // a 12x12 Linear on 4 rows: microseconds
  CHECK(t[4] >= 0.019);
  CHECK(t[5] >= 0.019);
  CHECK_THROWS_WITH(dist::layer_forward_seconds(*model, Tensor()), doctest::Contains("sample micro-batch"));
}

TEST_CASE("time-balanced boundaries: the same on every rank, and unlike the parameter split") {
  test::require_all_ok(test::run_ranks(2, [](int rank, int) {
    auto pg = dist::init_process_group();
    auto model = slow_tail_model();
    // Only rank 0 times; the others pass no sample and receive its times.
    std::vector<int> b = dist::time_balanced_boundaries(*model, rank == 0 ? randn({4, 12}) : Tensor(), 2, *pg, 3);
    expect(b == std::vector<int>{0, 5, 6}, "rank {}: time-balanced boundaries [{}], want [0, 5, 6]", rank,
           fmt::join(b, ", "));
    std::vector<int64_t> params;
    for (size_t i = 0; i < model->size(); ++i) params.push_back((*model)[i]->num_parameters());
    std::vector<int> by_params = dist::balanced_boundaries(params, 2);
    expect(by_params == std::vector<int>{0, 2, 6}, "by parameters [{}], want [0, 2, 6]", fmt::join(by_params, ", "));
    dist::PipelineOptions o;
    o.boundaries = b;
    dist::Pipeline pipe(model, pg, o);
    test::PipeBatch x = test::pipeline_batch(0, 4);
    Tensor y = randint(0, 12, {4}, kInt64);
    pipe.train_step(pipe.is_first() ? x.x : Tensor(), pipe.is_last() ? y : Tensor(), test::pipeline_ce);
    expect(pipe.stage_module().size() == (rank == 0 ? 5u : 1u), "rank {} holds {} layers", rank,
           pipe.stage_module().size());
  }, 60, "pipe_time_balance"));
}

}  // namespace
}  // namespace kiln
