// CUDA graphs against eager launches on the step where launch overhead dominates: the
// Fashion-MNIST MLP (784-256-256-10, SGD with momentum) at batch 128. "eager" is the main job's
// step (zero_grad, forward, cross-entropy, backward, step), "graph" the same step captured once
// and replayed by train::GraphedStep, as `mnist --cuda-graph` does, each replay after copying
// the next batch into the static inputs. Batches cycle through a few device-resident ones, so
// neither side pays for host copies. Median ms per step over blocks; the last line is JSON, which
// bench/graph_vs_pytorch.py sets beside PyTorch eager and torch.compile(mode="reduce-overhead").
// The target: the graph step >= 2x faster than eager.
//   tools/bazel run //bench:graph_bench [-- --steps 200 --blocks 5]
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/autograd.h"
#include "bench/host_check.h"
#include "bench/timing.h"
#include "core/util/cli.h"
#include "core/device_graph.h"
#include "core/generator.h"
#include "core/ops.h"
#include "train/graph_step.h"
#include "models/mlp_cnn.h"
#include "optim/sgd.h"
#ifdef KILN_HAVE_CUDA
#include "cuda/device.h"
#endif

using namespace kiln;
using kiln::bench::median;
using kiln::bench::now_s;

namespace {

/// Median ms per step of `step(i)` (i: the step's number) over `blocks` blocks of `steps` steps.
template <class Step> double time_steps(const Device& dev, Step&& step, int steps, int blocks) {
  std::vector<double> ms;
  int64_t i = 0;
  for (int b = 0; b < blocks; ++b) {
    synchronize(dev);
    const double t0 = now_s();
    for (int s = 0; s < steps; ++s) step(i++);
    synchronize(dev);
    ms.push_back((now_s() - t0) / steps * 1e3);
  }
  return median(ms);
}

struct Setup {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::SGD> opt;
  std::vector<Tensor> xs, ys;
};

Setup make_setup(Device dev, int64_t batch) {
  manual_seed(0);
  Setup s;
  s.model = models::make_model("mlp");
  s.model->to(dev);
  s.opt = std::make_unique<optim::SGD>(s.model->parameters(), optim::SGDOptions(0.01).set_momentum(0.9));
  for (int i = 0; i < 4; ++i) {
    s.xs.push_back(randn({batch, 1, 28, 28}).to(dev));
    s.ys.push_back(randint(0, 10, {batch}).to(dev));
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cuda";
  int steps = 200, blocks = 5;
  int64_t batch = 128;
  cli::App app("MNIST MLP training step: eager launches against one replayed CUDA graph.", "graph_bench");
  app.add_option("--device", device, "cuda|cuda:N")->check(cli::accepted_by([](const std::string& s) {
    (void)Device(s);
  }));
  app.add_option("--steps", steps, "steps per timed block")->check(cli::range(1, 1000000));
  app.add_option("--blocks", blocks, "timed blocks (the median is reported)")->check(cli::range(1, 10000));
  app.add_option("--batch-size", batch, "batch size")->check(cli::range<int64_t>(1, 1 << 20));
  bool allow_load = false;
  app.add_flag("--allow-load", allow_load, bench::kAllowLoadHelp);
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  const Device dev(device);
  if (!dev.is_cuda() || device_count(DeviceType::CUDA) == 0 || !has_device_graph(DeviceType::CUDA)) {
    std::printf("skipped: no CUDA device\n{\"benchmark\": \"cuda_graph\", \"skipped\": \"no CUDA device\"}\n");
    return 0;
  }
  bench::HostCheck host("graph_bench", allow_load);
  if (!host.may_report()) return bench::kLoadedExitCode;

  Setup eager = make_setup(dev, batch);
  auto eager_step = [&](int64_t i) {
    const size_t k = static_cast<size_t>(i) % eager.xs.size();
    eager.opt->zero_grad();
    Tensor loss = nn::functional::cross_entropy(eager.model->forward(eager.xs[k]), eager.ys[k]);
    loss.backward();
    eager.opt->step();
  };
  const int64_t warmup = train::GraphedStep::kWarmupSteps + 3;  // the graph's warm-up, capture and a few replays
  for (int64_t i = 0; i < warmup; ++i) eager_step(i);
  const double eager_ms = time_steps(dev, eager_step, steps, blocks);

  Setup graphed = make_setup(dev, batch);
  train::GraphedStep graph(dev, batch, [&](const Tensor& x, const Tensor& y) {
    graphed.opt->zero_grad(/*set_to_none=*/false);
    Tensor loss = nn::functional::cross_entropy(graphed.model->forward(x), y);
    loss.backward();
    graphed.opt->step();
    return loss;
  });
  auto graph_step = [&](int64_t i) {
    const size_t k = static_cast<size_t>(i) % graphed.xs.size();
    graph.run(graphed.xs[k], graphed.ys[k]);
  };
  for (int64_t i = 0; i < warmup; ++i) graph_step(i);
  const double graph_ms = time_steps(dev, graph_step, steps, blocks);
  // Both ran the same steps from the same start: their losses agree (a wrong replay would not).
  const double eager_loss = nn::functional::cross_entropy(eager.model->forward(eager.xs[0]), eager.ys[0]).item<double>();
  const double graph_loss =
      nn::functional::cross_entropy(graphed.model->forward(graphed.xs[0]), graphed.ys[0]).item<double>();

  fmt::print("MNIST MLP step on {}, batch {} (median of {} blocks of {} steps)\n", device, batch, blocks, steps);
  fmt::print("{:8} {:>9} {:>9}\n", "mode", "step ms", "speedup");
  fmt::print("{:8} {:9.4f} {:8.2f}x\n", "eager", eager_ms, 1.0);
  fmt::print("{:8} {:9.4f} {:8.2f}x  (target >= 2x; {} replays)\n", "graph", graph_ms, eager_ms / graph_ms,
             graph.replays());
  fmt::print("loss after training: eager {:.5f}, graph {:.5f}\n", eager_loss, graph_loss);
  nlohmann::ordered_json line = {{"benchmark", "cuda_graph"}, {"device", device},       {"model", "mlp"},
                                 {"batch_size", batch},       {"eager_step_ms", eager_ms}, {"graph_step_ms", graph_ms},
                                 {"speedup", eager_ms / graph_ms}, {"eager_loss", eager_loss},
                                 {"graph_loss", graph_loss}};
  host.finish(line);
  fmt::print("{}\n", line.dump());
  return 0;
}
