// Shared pieces of the pipeline tests: a tiny MLP every rank builds identically, the data of a
// step, and a check of one stage's parameters against the same layers trained in one process.
#pragma once

#include <memory>
#include <string>

#include "core/generator.h"
#include "core/ops.h"
#include "distributed/pipeline.h"
#include "nn/nn.h"
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

}  // namespace kiln::test
