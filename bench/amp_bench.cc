// Mixed-precision training step time and peak memory: f32 against bf16 and f16 autocast (f16
// with dynamic loss scaling), on the Fashion-MNIST MLP and CNN and a matmul-bound wide MLP
// (784-4096-4096-4096-10, batch 512) and a conv-bound CNN with batch norm (wide_cnn, batch 256;
// not in the default --models list), on the chosen device. Its f32 rows are the plain step times
// that bench/amp_vs_pytorch.py sets against PyTorch eager's. Each (model, precision) runs in its
// own process so its peak memory is its own (CUDA: the caching allocator's peak allocated
// bytes; CPU: the process's peak resident size). Median step time of several blocks. The last
// line is JSON; bench/amp_vs_pytorch.py runs PyTorch's autocast on the same models beside it.
//   tools/bazel run //bench:amp_bench [-- --device cuda --steps 20]
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "amp/amp.h"
#include "autograd/autograd.h"
#include "bench/cuda_probe.h"
#include "bench/host_check.h"
#include "bench/timing.h"
#include "core/util/cli.h"
#include "core/generator.h"
#include "core/ops.h"
#include "distributed/launch/local_ranks.h"
#include "models/mlp_cnn.h"
#include "optim/sgd.h"
#ifdef KILN_HAVE_CUDA
#include "cuda/allocator.h"
#include "cuda/device.h"
#endif

using namespace kiln;
using kiln::bench::median;
using kiln::bench::now_s;

namespace {

/// A conv-bound CNN with batch norm (batch 256): 1-64-128-256 channels of 3x3 convolutions.
std::shared_ptr<nn::Sequential> make_wide_cnn() {
  auto seq = std::make_shared<nn::Sequential>();
  auto block = [&](int64_t in, int64_t out) {
    seq->push_back(nn::Conv2d(in, out, 3, {.padding = 1}));
    seq->push_back(nn::BatchNorm2d(out));
    seq->push_back(nn::ReLU());
  };
  block(1, 64);
  block(64, 128);
  seq->push_back(nn::MaxPool2d(2));
  block(128, 256);
  seq->push_back(nn::MaxPool2d(2));
  seq->push_back(nn::Flatten());
  seq->push_back(nn::Linear(256 * 7 * 7, 10));
  return seq;
}

std::shared_ptr<nn::Sequential> make_bench_model(const std::string& name) {
  if (name == "wide_mlp") return models::make_wide_mlp(4096);
  if (name == "wide_cnn") return make_wide_cnn();
  return models::make_model(name);
}

double peak_bytes(Device d) {
#ifdef KILN_HAVE_CUDA
  if (d.is_cuda()) return static_cast<double>(cuda::memory_stats(d.index).peak_allocated);
#endif
  (void)d;
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024;
}

/// One (model, precision) run: median ms per step and peak bytes, written to `out`.
void run_one(const std::string& model_name, const std::string& precision, Device dev, int steps, int blocks,
             const std::string& out) {
  manual_seed(0);
  auto model = make_bench_model(model_name);
  model->to(dev);
  const int64_t batch = model_name == "wide_mlp" ? 512 : model_name == "wide_cnn" ? 256 : 128;
  Tensor x = randn({batch, 1, 28, 28}).to(dev), y = randint(0, 10, {batch}).to(dev);
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.01).set_momentum(0.9));
  const bool low = precision != "f32";
  const DType dt = precision == "f16" ? kFloat16 : kBFloat16;
  amp::GradScalerOptions so;
  so.enabled = precision == "f16";
  amp::GradScaler scaler(so);
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastGuard autocast(dt, low);
      loss = nn::functional::cross_entropy(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };
  step();
  step();
  synchronize(dev);
  std::vector<double> ms;
  for (int b = 0; b < blocks; ++b) {
    double t0 = now_s();
    for (int s = 0; s < steps; ++s) step();
    synchronize(dev);
    ms.push_back((now_s() - t0) / steps * 1e3);
  }
  std::ofstream(out) << median(ms) << " " << peak_bytes(dev) << "\n";
}

}  // namespace

int main(int argc, char** argv) {
  std::string device = "cpu";
  int steps = 10, blocks = 3;
  std::vector<std::string> models = {"mlp", "cnn", "wide_mlp"};
  cli::App app("Mixed-precision step time and peak memory: f32 against bf16 and f16 autocast.", "amp_bench");
  app.add_option("--device", device, "cpu|cuda|cuda:N")->check(cli::accepted_by([](const std::string& s) {
    (void)Device(s);
  }));
  app.add_option("--steps", steps, "steps per timed block")->check(cli::range(1, 1000000));
  app.add_option("--blocks", blocks, "timed blocks (the median is reported)")->check(cli::range(1, 10000));
  app.add_option("--models", models, "comma-separated models")
      ->delimiter(',')
      ->check(cli::one_of({"mlp", "cnn", "wide_mlp", "wide_cnn"}));
  bool allow_load = false;
  app.add_flag("--allow-load", allow_load, bench::kAllowLoadHelp);
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  const Device dev(device);
  if (dev.is_cuda() && !bench::cuda_device_present()) {
    std::printf("skipped: no CUDA device\n{\"benchmark\": \"amp\", \"skipped\": \"no CUDA device\"}\n");
    return 0;
  }
  bench::HostCheck host("amp_bench", allow_load);
  if (!host.may_report()) return bench::kLoadedExitCode;
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  fmt::print("Mixed precision step time on {} (median of {} blocks of {} steps; peak = {})\n", device, blocks, steps,
             dev.is_cuda() ? "peak allocated device memory" : "peak resident set of the process");
  fmt::print("{:9} {:5} {:>9} {:>9} {:>10}\n", "model", "prec", "step ms", "vs f32", "peak MiB");
  std::string scratch = fmt::format("/tmp/kiln_amp_bench.{}", getpid());
  for (const std::string& m : models) {
    double f32_ms = 0;
    for (std::string p : {"f32", "bf16", "f16"}) {
      // A fresh process per run: its peak memory is its own (and CUDA starts in the child).
      auto r = dist::run_local_ranks(1, [&](int, int) { run_one(m, p, dev, steps, blocks, scratch); },
                                     {.timeout_s = 1200, .threads_per_rank = 0});
      if (r[0].exit_code != 0) {
        std::fprintf(stderr, "amp_bench: %s %s failed\n", m.c_str(), p.c_str());
        return 1;
      }
      double ms = 0, peak = 0;
      std::ifstream(scratch) >> ms >> peak;
      if (p == "f32") f32_ms = ms;
      fmt::print("{:9} {:5} {:9.2f} {:8.2f}x {:10.1f}\n", m, p, ms, f32_ms / ms, peak / (1 << 20));
      results.push_back({{"model", m},
                         {"precision", p},
                         {"step_ms", ms},
                         {"speedup_vs_f32", f32_ms / ms},
                         {"peak_mib", peak / (1 << 20)}});
    }
  }
  std::remove(scratch.c_str());
  nlohmann::ordered_json line = {{"benchmark", "amp"}, {"device", device}, {"results", results}};
  host.finish(line);
  fmt::print("{}\n", line.dump());
  return 0;
}
