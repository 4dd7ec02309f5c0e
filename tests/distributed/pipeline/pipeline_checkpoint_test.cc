// Pipeline checkpoints: each stage saves and restores its own part (weights and optimizer); a
// merged checkpoint has the unsplit model's keys, loads into the unsplit model, and loads into a
// different split; with the stages' optimizer state (keyed by the caller as the unsplit
// optimizer's), the unsplit model's optimizer loads it.
#include <doctest/doctest.h>

#include <filesystem>

#include "autograd/autograd.h"
#include "distributed/backend/init.h"
#include "distributed/pipeline/pipeline.h"
#include "train/pipeline_checkpoint.h"
#include "optim/optim.h"
#include "tests/distributed/pipeline/pipeline_helpers.h"

namespace kiln {
namespace {

using test::expect;

constexpr auto ce = test::pipeline_ce;

dist::PipelineOptions two_micro_batches() {
  dist::PipelineOptions o;
  o.micro_batches = 2;
  return o;
}
optim::SGDOptions momentum_sgd() { return optim::SGDOptions(0.1).set_momentum(0.9); }
// One training step of the pipeline on batch `step`.
void train(dist::Pipeline& p, optim::SGD& op, int step) {
  test::PipeBatch b = test::pipeline_batch(step, 8);
  op.zero_grad();
  p.train_step(b.x, b.y, ce);
  op.step();
}

TEST_CASE("checkpoint path of a stage") {
  CHECK(dist::stage_checkpoint_path("/d/ckpt.safetensors", 1, 4) == "/d/ckpt.stage1-of-4.safetensors");
  CHECK(dist::stage_checkpoint_path("/d/ckpt", 0, 2) == "/d/ckpt.stage0-of-2");
}

TEST_CASE("each stage saves and restores its part; resumed training continues identically") {
  std::string dir = test::scratch_dir("pipe_ckpt");
  test::require_all_ok(test::run_ranks(3, [dir](int, int) {
    auto pg = dist::init_process_group();
    const dist::PipelineOptions o = two_micro_batches();
    const optim::SGDOptions sgd = momentum_sgd();
    dist::Pipeline pipe(test::pipeline_mlp(3), pg, o);
    optim::SGD opt(pipe.parameters(), sgd);
    for (int step = 0; step < 2; ++step) train(pipe, opt, step);
    train::TrainingState state;
    state.step = 2;
    dist::save_stage_checkpoint(pipe, dir + "/ckpt.safetensors", &opt, state);

    dist::Pipeline resumed(test::pipeline_mlp(99), pg, o);
    optim::SGD resumed_opt(resumed.parameters(), sgd);
    train::TrainingState loaded = dist::load_stage_checkpoint(resumed, dir + "/ckpt.safetensors", &resumed_opt);
    expect(loaded.step == 2, "loaded step {}", loaded.step);
    train(pipe, opt, 2);  // momentum must have come back too: the next step matches
    train(resumed, resumed_opt, 2);
    auto a = pipe.parameters(), r = resumed.parameters();
    for (size_t i = 0; i < a.size(); ++i)
      expect((a[i] - r[i]).abs().max().item<float>() == 0, "stage {}: parameter {} differs after resuming",
             pipe.stage(), i);
  }, 120, "pipe_ckpt"));
}

TEST_CASE("a merged checkpoint has the unsplit model's keys and loads into any split") {
  std::string dir = test::scratch_dir("pipe_merged");
  test::require_all_ok(test::run_ranks(3, [dir](int rank, int) {
    auto pg = dist::init_process_group();
    auto pair = dist::new_group({0, 1});  // a 2-stage split on ranks 0 and 1
    dist::PipelineOptions o;
    o.micro_batches = 2;
    dist::Pipeline pipe(test::pipeline_mlp(3), pg, o);
    optim::SGD opt(pipe.parameters(), optim::SGDOptions(0.1));
    test::PipeBatch b = test::pipeline_batch(0, 8);
    opt.zero_grad();
    pipe.train_step(b.x, b.y, ce);
    opt.step();
    const std::string path = dir + "/merged.safetensors";
    train::TrainingState state;
    state.step = 5;
    dist::save_merged_checkpoint(pipe, path, state);
    expect(!std::filesystem::exists(path + ".part0"), "the parts were left behind");

    // The unsplit model loads it (strict: exactly its keys) and equals every stage.
    auto whole = test::pipeline_mlp(42);
    train::TrainingState loaded = train::load_checkpoint(path, *whole, nullptr);
    expect(loaded.step == 5, "merged step {}", loaded.step);
    test::expect_stage_matches(pipe, *whole, 0, "merged into the unsplit model");

    if (pair) {  // another split: layers [0, 5) and [5, 7)
      dist::PipelineOptions o2;
      o2.boundaries = {0, 5, 7};
      dist::Pipeline other(test::pipeline_mlp(77), pair, o2);
      dist::load_merged_checkpoint(other, path);
      test::expect_stage_matches(other, *whole, 0, "merged into a 2-stage split");
    }
    pg->barrier()->wait();
    (void)rank;
  }, 120, "pipe_merged"));
}

TEST_CASE("a merged checkpoint with optimizer state loads into the unsplit model's optimizer") {
  std::string dir = test::scratch_dir("pipe_merged_opt");
  test::require_all_ok(test::run_ranks(3, [dir](int, int) {
    dist::Pipeline pipe(test::pipeline_mlp(3), dist::init_process_group(), two_micro_batches());
    optim::SGD opt(pipe.parameters(), momentum_sgd());
    train(pipe, opt, 0);
    // This stage's parameters are a run of the unsplit model's: shift its indices to theirs.
    auto whole = test::pipeline_mlp(42);
    const nn::NamedTensors names = whole->named_parameters();
    int64_t first = 0;
    const std::string mine = pipe.global_name(pipe.stage_module().named_parameters().front().first);
    while (names[static_cast<size_t>(first)].first != mine) ++first;
    optim::StateDict part;
    for (const auto& [key, t] : opt.state_dict()) {
      if (key.rfind("state.", 0) != 0) continue;
      const size_t dot = key.find('.', 6);
      part["state." + std::to_string(first + std::stoll(key.substr(6, dot - 6))) + key.substr(dot)] = t;
    }
    std::vector<int64_t> all(names.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
    part["param_groups.0.params"] = tensor<int64_t>(all, {static_cast<int64_t>(all.size())});
    for (const auto& [key, t] : opt.state_dict())
      if (key.rfind("param_groups.0.", 0) == 0 && key != "param_groups.0.params") part[key] = t;
    const std::string path = dir + "/merged.safetensors";
    dist::save_merged_checkpoint(pipe, path, train::TrainingState{}, nullptr, part, opt.name());

    optim::SGD whole_opt(whole->parameters(), momentum_sgd());
    train::load_checkpoint(path, *whole, &whole_opt);  // throws unless every parameter's state is there
    test::expect_stage_matches(pipe, *whole, 0, "merged weights");
    const auto local = pipe.parameters();
    for (size_t j = 0; j < local.size(); ++j) {
      const Tensor& a = opt.state(static_cast<int64_t>(j)).at("momentum_buffer");
      const Tensor& w = whole_opt.state(first + static_cast<int64_t>(j)).at("momentum_buffer");
      expect((a - w).abs().max().item<float>() == 0, "stage {}: parameter {}'s momentum differs in the merged file",
             pipe.stage(), j);
    }
  }, 120, "pipe_merged_opt"));
}

}  // namespace
}  // namespace kiln
