// Shared pieces of the pipeline tests: a tiny MLP every rank builds identically, the data of a
// step, the steps trained through a pipeline beside one process, and a check of one stage's
// parameters against the same layers trained in one process, and the last step's compute
// times per action.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>

#include "core/generator.h"
#include "core/ops.h"
#include "distributed/pipeline/pipeline.h"
#include "distributed/pipeline/pipeline_schedule.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/distributed/multiprocess.h"

namespace kiln::test {

/// 7 layers: Linear(12,16) Tanh Linear(16,16) ReLU Linear(16,16) Tanh Linear(16,5).
inline std::shared_ptr<nn::Sequential> pipeline_mlp(uint64_t seed, DType dt = kFloat32) {
  manual_seed(seed);
  auto m = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(12, 16), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(16, 16),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 16), std::make_shared<nn::Tanh>(),
      std::make_shared<nn::Linear>(16, 5)});
  m->to(dt);
  return m;
}

struct PipeBatch {
  Tensor x, y;
};
inline PipeBatch pipeline_batch(int step, int64_t rows, DType dt = kFloat32) {
  Generator g(500 + static_cast<uint64_t>(step));
  return {randn({rows, 12}, {}, &g).to(dt), randint(0, 5, {rows}, kInt64, &g)};
}

/// The loss the pipeline tests train with.
inline Tensor pipeline_ce(const Tensor& out, const Tensor& y) { return nn::functional::cross_entropy(out, y); }

/// Every parameter of this rank's stage equals the unsplit reference's parameter of the same
/// (global) name within `tol`.
inline void expect_stage_matches(dist::Pipeline& pipe, nn::Module& reference, double tol, const std::string& what) {
  nn::StateDict ref = reference.state_dict();
  for (const auto& [local, p] : pipe.stage_module().named_parameters()) {
    std::string name = pipe.global_name(local);
    expect(ref.count(name) == 1, "{}: stage {} has '{}' ({}), which the reference lacks", what, pipe.stage(), local,
           name);
    double d = (p - ref.at(name)).abs().max().item<double>();
    expect(d <= tol, "{}: stage {} parameter '{}' differs from single-process training by {}", what, pipe.stage(),
           name, d);
  }
}

/// Trains `steps` SGD-with-momentum steps through `pipe` and through the unsplit `reference` on
/// the whole batch (pipeline_batch(step, rows, dt)); the last stage's loss must equal the
/// reference's within `tol`, every other stage's must be NaN.
inline void train_beside(dist::Pipeline& pipe, nn::Module& reference, int steps, int64_t rows, DType dt, double tol,
                         const std::string& what) {
  optim::SGD opt(pipe.parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
  optim::SGD ref_opt(reference.parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
  for (int step = 0; step < steps; ++step) {
    PipeBatch b = pipeline_batch(step, rows, dt);
    opt.zero_grad();
    double loss = pipe.train_step(pipe.is_first() ? b.x : Tensor(), pipe.is_last() ? b.y : Tensor(), pipeline_ce);
    opt.step();
    ref_opt.zero_grad();
    Tensor ref_loss = pipeline_ce(reference.forward(b.x), b.y);
    ref_loss.backward();
    ref_opt.step();
    if (pipe.is_last())
      expect(std::abs(loss - ref_loss.item<double>()) <= tol, "{}: step {} loss {} but {} in one process", what, step,
             loss, ref_loss.item<double>());
    else
      expect(std::isnan(loss), "{}: stage {} returned loss {}, not NaN", what, pipe.stage(), loss);
  }
}

/// The last step's action_seconds: one positive entry per action of this stage's schedule,
/// summing to its forward and backward seconds.
inline void expect_action_times(dist::Pipeline& pipe, dist::Schedule schedule, int rank, int world, int m, int v,
                                const std::string& what) {
  const auto& t = pipe.stats().action_seconds;
  const size_t want = dist::schedule_actions(schedule, rank, world, m, v).size();
  const double sum = std::accumulate(t.begin(), t.end(), 0.0);
  const double total = pipe.stats().forward_seconds + pipe.stats().backward_seconds;
  expect(t.size() == want, "{}: stage {} timed {} actions, its schedule has {}", what, rank, t.size(), want);
  expect(std::all_of(t.begin(), t.end(), [](double x) { return x > 0; }), "{}: stage {}: an action took no time",
         what, rank);
  expect(std::abs(sum - total) <= 1e-9 * std::max(1.0, total), "{}: stage {}: actions sum to {} s, compute {} s",
         what, rank, sum, total);
}

}  // namespace kiln::test
