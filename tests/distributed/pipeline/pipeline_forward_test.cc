// Pipeline::forward (evaluation through the stages) on 3 real processes: the last stage gets the
// unsplit model's output (exactly before training, within 1e-5 between training steps) for
// batches of any size; a stage whose forward fails stops the later stages, which name it;
// from_last_stage brings the last stage's numbers to every stage.
#include <doctest/doctest.h>

#include "distributed/backend/init.h"
#include "distributed/pipeline/pipeline.h"
#include "optim/optim.h"
#include "tests/distributed/pipeline/pipeline_helpers.h"

namespace kiln {
namespace {

using test::expect;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// The unsplit model trained beside the pipeline, on the whole batch.
struct Reference {
  std::shared_ptr<nn::Sequential> model = test::pipeline_mlp(4);
  optim::SGD opt{model->parameters(), optim::SGDOptions(0.1)};
  void train(const test::PipeBatch& b) {
    opt.zero_grad();
    test::pipeline_ce(model->forward(b.x), b.y).backward();
    opt.step();
  }
};

TEST_CASE("forward through 3 stages gives the unsplit model's output, any batch size, between training steps") {
  test::require_all_ok(test::run_ranks(3, [](int, int) {
    auto pg = dist::init_process_group();
    dist::Pipeline pipe(test::pipeline_mlp(4), pg, {.micro_batches = 2});
    optim::SGD opt(pipe.parameters(), optim::SGDOptions(0.1));
    Reference reference;
    for (int step = 0; step < 3; ++step) {
      for (int64_t rows : {5, 1, 9}) {
        Tensor x = test::pipeline_batch(10 + step, rows).x;
        Tensor out = pipe.forward(pipe.is_first() ? x : Tensor());
        if (!pipe.is_last()) {
          expect(!out.defined(), "stage {} returned an output", pipe.stage());
          continue;
        }
        Tensor want = reference.model->forward(x);
        expect(out.sizes() == want.sizes(), "output {} but {} in one process", out.shape_str(), want.shape_str());
        // Exact before training; after it, within what summing over micro-batches in another order gives.
        const double d = (out - want).abs().max().item<double>(), tol = step == 0 ? 0.0 : 1e-5;
        expect(d <= tol, "step {}, {} rows: the output differs by {}", step, rows, d);
        expect(!out.requires_grad(), "forward recorded a graph");
      }
      test::PipeBatch b = test::pipeline_batch(step, 8);
      opt.zero_grad();
      pipe.train_step(pipe.is_first() ? b.x : Tensor(), pipe.is_last() ? b.y : Tensor(), test::pipeline_ce);
      opt.step();
      reference.train(b);
    }
    // The last stage's metrics reach every stage (the others' values are ignored).
    const std::vector<double> got = pipe.from_last_stage({10.0 * pipe.stage(), 0.5});
    expect(got.size() == 2 && got[0] == 20 && got[1] == 0.5, "stage {}: from_last_stage gave [{}, {}]", pipe.stage(),
           got[0], got[1]);
  }, 60, "pipe_forward"));
}

TEST_CASE("a stage whose forward fails stops the later stages, naming it") {
  auto results = test::run_ranks(3, [](int, int) {
    auto pg = dist::init_process_group();
    dist::Pipeline pipe(test::pipeline_mlp(4), pg);
    Tensor wrong = zeros({4, 7});  // the first layer wants 12 features
    pipe.forward(pipe.is_first() ? wrong : Tensor());
  }, 60, "pipe_forward_fail");
  for (auto& r : results) {
    INFO(r.stderr_text);
    CHECK(r.exit_code == 1);
  }
  CHECK_MESSAGE(has(results[0].stderr_text, "Pipeline::forward: stage 0 (rank 0) failed on [4, 7] f32"),
                results[0].stderr_text);
  CHECK_MESSAGE(has(results[1].stderr_text, "Pipeline::forward: stage 1 (rank 1) stops because stage 0 failed"),
                results[1].stderr_text);
  CHECK_MESSAGE(has(results[2].stderr_text, "Pipeline::forward: stage 2 (rank 2) stops because stage 1 failed"),
                results[2].stderr_text);
}

}  // namespace
}  // namespace kiln
