// Training features across pipeline stages: gradient-norm clipping whose norm is taken over all
// stages (equal to clipping the unsplit model), a GradScaler skip decided on one stage that
// skips the step on every stage, and autocast (bf16 activations sent between stages).
#include <doctest/doctest.h>

#include <limits>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "autograd/autograd.h"
#include "distributed/backend/init.h"
#include "distributed/pipeline/pipeline.h"
#include "distributed/data_parallel/clip_grad_norm.h"
#include "distributed/data_parallel/scaler_sync.h"
#include "optim/optim.h"
#include "tests/distributed/pipeline/pipeline_helpers.h"

namespace kiln {
namespace {

using test::expect;

constexpr auto ce = test::pipeline_ce;

void clip_matches_unsplit(int rank, int world, double norm_type) {
  auto pg = dist::init_process_group();
  dist::PipelineOptions o;
  o.micro_batches = 4;
  dist::Pipeline pipe(test::pipeline_mlp(3), pg, o);
  auto reference = test::pipeline_mlp(3);
  optim::SGD opt(pipe.parameters(), optim::SGDOptions(0.5));
  optim::SGD ref_opt(reference->parameters(), optim::SGDOptions(0.5));
  for (int step = 0; step < 3; ++step) {
    test::PipeBatch b = test::pipeline_batch(step, 16);
    opt.zero_grad();
    pipe.train_step(b.x, b.y, ce);
    double norm = dist::clip_grad_norm_(pipe.parameters(), 0.05, *pg, norm_type);
    opt.step();
    ref_opt.zero_grad();
    ce(reference->forward(b.x), b.y).backward();
    double ref_norm = optim::clip_grad_norm_(reference->parameters(), 0.05, norm_type);
    ref_opt.step();
    expect(ref_norm > 0.05, "the test should clip: the norm is only {}", ref_norm);
    expect(std::abs(norm - ref_norm) <= 1e-5 * ref_norm, "rank {} step {}: global norm {} but {} unsplit", rank, step,
           norm, ref_norm);
  }
  test::expect_stage_matches(pipe, *reference, 1e-5, fmt::format("clip p={} norm {}", world, norm_type));
}

TEST_CASE("clipping across stages uses the global norm: equal to clipping the unsplit model") {
  test::require_all_ok(test::run_ranks(2, [](int r, int w) { clip_matches_unsplit(r, w, 2.0); }, 120, "pclip2"));
  test::require_all_ok(test::run_ranks(3, [](int r, int w) { clip_matches_unsplit(r, w, 2.0); }, 120, "pclip3"));
  test::require_all_ok(test::run_ranks(
      3, [](int r, int w) { clip_matches_unsplit(r, w, std::numeric_limits<double>::infinity()); }, 120, "pclip3i"));
}

TEST_CASE("an inf gradient on one stage skips the step on every stage (share_found_inf over the pipeline)") {
  test::require_all_ok(test::run_ranks(3, [](int rank, int) {
    auto pg = dist::init_process_group();
    dist::PipelineOptions o;
    o.micro_batches = 2;
    dist::Pipeline pipe(test::pipeline_mlp(5), pg, o);
    optim::SGD opt(pipe.parameters(), optim::SGDOptions(0.1));
    amp::GradScaler scaler;
    dist::share_found_inf(scaler, pg);
    auto scaled = [&](const Tensor& out, const Tensor& y) { return scaler.scale(ce(out, y)); };
    Tensor before = pipe.parameters()[0].clone();
    for (int step = 0; step < 2; ++step) {
      test::PipeBatch b = test::pipeline_batch(step, 8);
      opt.zero_grad();
      pipe.train_step(b.x, b.y, scaled);
      // Only the middle stage overflows, and only on step 0.
      if (rank == 1 && step == 0) pipe.parameters()[0].grad().fill_(std::numeric_limits<float>::infinity());
      bool stepped = scaler.step(opt);
      scaler.update();
      expect(stepped == (step == 1), "rank {} step {}: stepped={}", rank, step, stepped);
      if (step == 0)
        expect((pipe.parameters()[0] - before).abs().max().item<float>() == 0, "rank {} changed its weights", rank);
    }
    expect(scaler.skipped_steps() == 1, "rank {} skipped {} steps", rank, scaler.skipped_steps());
    expect(scaler.scale() == 32768.0, "rank {} scale {}", rank, scaler.scale());
  }, 120, "pscaler"));
}

TEST_CASE("under autocast, bf16 activations cross the stages and gradients match one process") {
  test::require_all_ok(test::run_ranks(2, [](int, int) {
    auto pg = dist::init_process_group();
    dist::PipelineOptions o;
    o.micro_batches = 2;
    dist::Pipeline pipe(test::pipeline_mlp(4), pg, o);
    auto reference = test::pipeline_mlp(4);
    test::PipeBatch b = test::pipeline_batch(0, 8);
    {
      amp::AutocastGuard autocast(kBFloat16);
      if (pipe.is_first()) {  // what stage 0 sends on
        NoGradGuard no_grad;
        DType sent = pipe.stage_module().forward(b.x).dtype();
        expect(sent == kBFloat16, "stage 0 would send {}", sent);
      }
      pipe.train_step(b.x, b.y, ce);
      ce(reference->forward(b.x), b.y).backward();
    }
    nn::NamedTensors ref = reference->named_parameters();
    for (const auto& [local, p] : pipe.stage_module().named_parameters()) {
      std::string name = pipe.global_name(local);
      Tensor r;
      for (const auto& [n, t] : ref)
        if (n == name) r = t.grad();
      double d = (p.grad() - r).abs().max().item<double>(), scale = r.abs().max().item<double>();
      expect(d <= 2e-2 * std::max(1.0, scale), "stage {} '{}': gradient differs by {} (max {})", pipe.stage(), name, d,
             scale);
    }
  }, 120, "pautocast"));
}

}  // namespace
}  // namespace kiln
