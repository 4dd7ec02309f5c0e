// What the Trainer's tests share: the synthetic Fashion-MNIST-format data (synthetic_mnist.h) as
// loaders, a small MLP, callbacks that stop or record, and file and weight comparisons.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "data/data.h"
#include "nn/nn.h"
#include "tests/train/synthetic_mnist.h"
#include "train/callback.h"
#include "train/fit.h"

namespace kiln::test {

/// The synthetic split (640 training or 200 test images) from `dir`.
inline std::shared_ptr<data::MnistDataset> synthetic_set(const fs::path& dir, bool train) {
  return std::make_shared<data::MnistDataset>(dir.string(), train, data::kFashionMnistNormalization);
}

/// SGD at lr 0.05 for `epochs`, no progress lines: the options the tests start from.
inline train::FitOptions quiet(int64_t epochs = 2) {
  return {.epochs = epochs, .lr = 0.05, .log_every = 0, .log = nullptr};
}

/// 784-32-10 with an optional dropout, from manual_seed(0).
inline nn::ModulePtr<> small_mlp(double dropout = 0) {
  manual_seed(0);
  if (dropout > 0)
    return nn::Sequential{nn::Flatten(), nn::Linear(784, 32), nn::ReLU(), nn::Dropout(dropout), nn::Linear(32, 10)};
  return nn::Sequential{nn::Flatten(), nn::Linear(784, 32), nn::ReLU(), nn::Linear(32, 10)};
}

/// Requests a stop after global step `step` (as a preemption would) or at the end of epoch
/// `epoch` (1-based).
class StopAt : public train::Callback {
 public:
  explicit StopAt(int64_t step, int64_t epoch = 0) : step_(step), epoch_(epoch) {}
  void on_step_end(train::Trainer& t, const train::StepMetrics& s) override {
    if (s.step == step_) t.request_stop();
  }
  void on_epoch_end(train::Trainer& t, const train::EpochMetrics& m) override {
    if (m.epoch + 1 == epoch_) t.request_stop();
  }

 private:
  int64_t step_, epoch_;
};

inline std::string file_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE(f.good());
  return std::string(std::istreambuf_iterator<char>(f), {});
}

/// The largest absolute difference between two modules' parameters.
inline double max_param_diff(const nn::Module& a, const nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  REQUIRE(pa.size() == pb.size());
  double d = 0;
  for (size_t i = 0; i < pa.size(); ++i)
    d = std::max(d, (pa[i].to(kFloat64) - pb[i].to(kFloat64)).abs().max().item<double>());
  return d;
}

}  // namespace kiln::test
