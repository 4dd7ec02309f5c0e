// Stage boundaries by cost (see pipeline_balance.h): a min-max partition by dynamic programming
// over prefix sums, and the per-layer forward timing that feeds it.
#include "distributed/pipeline/pipeline_balance.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "core/error.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "distributed/pipeline/pipeline.h"

namespace kiln::dist {

std::vector<int> balanced_boundaries_by_cost(const std::vector<double>& layer_cost, int stages) {
  const int n = static_cast<int>(layer_cost.size());
  KILN_CHECK(stages >= 1 && stages <= n, "balanced_boundaries: {} stages for {} layers", stages, n);
  std::vector<double> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + layer_cost[i];
  // best[k][i]: the smallest possible largest stage when the first i layers form k stages.
  const double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int i = k; i <= n; ++i)
      for (int j = k - 1; j < i; ++j) {
        if (best[k - 1][j] == kInf) continue;
        double cost = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (cost < best[k][i]) {
          best[k][i] = cost;
          cut[k][i] = j;
        }
      }
  std::vector<int> b(stages + 1);
  b[stages] = n;
  for (int k = stages, i = n; k > 0; --k) i = b[k - 1] = cut[k][i];
  return b;
}

// Parameter counts are far below 2^53, so their sums and comparisons are exact in double.
std::vector<int> balanced_boundaries(const std::vector<int64_t>& layer_params, int stages) {
  return balanced_boundaries_by_cost(std::vector<double>(layer_params.begin(), layer_params.end()), stages);
}

std::vector<double> layer_forward_seconds(nn::Sequential& model, const Tensor& sample, int repeats) {
  KILN_CHECK(sample.defined(), "layer_forward_seconds: the sample micro-batch is undefined");
  KILN_CHECK(repeats >= 1, "layer_forward_seconds: repeats must be at least 1, got {}", repeats);
  NoGradGuard no_grad;
  std::vector<std::vector<double>> runs(model.size());
  for (int r = 0; r <= repeats; ++r) {  // run 0 warms up caches and allocators
    Tensor x = sample;
    for (size_t i = 0; i < model.size(); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      x = model[i]->forward(x);
      (void)x.sum().item<double>();  // waits for the device, so the time is this layer's
      if (r > 0) runs[i].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  std::vector<double> median;
  for (auto& v : runs) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    median.push_back(v[v.size() / 2]);
  }
  return median;
}

std::vector<int> time_balanced_boundaries(nn::Sequential& model, const Tensor& sample, int stages, ProcessGroup& pg,
                                          int repeats) {
  // NCCL moves device tensors: the model's device (ranks other than 0 have no sample).
  const std::vector<Tensor> params = model.parameters();
  const Device comm = pg.backend() == "nccl" && !params.empty() ? params[0].device() : kCPU;
  Tensor times = zeros({static_cast<int64_t>(model.size())}, TensorOptions(kFloat64).device(comm));
  if (pg.rank() == 0) times = tensor(layer_forward_seconds(model, sample, repeats)).to(comm);
  pg.broadcast(times, 0)->wait();
  return balanced_boundaries_by_cost(times.to(kCPU).to_vector<double>(), stages);
}

}  // namespace kiln::dist
