// What the observability hooks cost when the profiler is off, per step of the main job's MLP
// (784-256-256-10, batch 128, SGD): the cost of each always-present hook measured in a loop
// (an inactive RecordFunction, a clock read, an allocation through the counting wrapper vs the
// allocator under it), times how often one training step hits it (counted by a profiled step),
// against the step's measured time. Kernels cost nothing extra when off: the kernel table holds
// the backends' own pointers (profiler_test checks it).
//   tools/bazel run //bench:profiler_overhead_bench
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>

#include "autograd/autograd.h"
#include "bench/host_check.h"
#include "bench/timing.h"
#include "core/util/cli.h"
#include "core/allocator.h"
#include "core/ops.h"
#include "models/mlp_cnn.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "profiler/key_averages.h"
#include "profiler/memory.h"
#include "profiler/profiler.h"

using namespace kiln;

namespace {

template <class F> double ns_per(int n, F&& f) {
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    double t = bench::now_s();
    for (int i = 0; i < n; ++i) f();
    best = std::min(best, (bench::now_s() - t) / n * 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  cli::App app("What the profiler's hooks cost per step of the main job's MLP when no profiler records.",
               "profiler_overhead_bench");
  bool allow_load = false;
  app.add_flag("--allow-load", allow_load, bench::kAllowLoadHelp);
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  bench::HostCheck host("profiler_overhead_bench", allow_load);
  if (!host.may_report()) return bench::kLoadedExitCode;
  auto model = models::make_mlp();
  optim::SGDOptions so(0.01);
  so.momentum = 0.9;
  optim::SGD opt(model->parameters(), so);
  Tensor x = randn({128, 1, 28, 28}), y = randint(0, 10, {128}, kInt64);
  auto step = [&] {
    Tensor loss = nn::functional::cross_entropy(model->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  for (int i = 0; i < 5; ++i) step();

  // How often one step hits each hook.
  profiler::Profiler prof;
  prof.start();
  step();
  prof.stop();
  int64_t allocs = 0, nodes = 0, kernels = 0;
  for (const auto& e : prof.events()) {
    allocs += e.category == "alloc";
    nodes += e.category == "backward";
    kernels += e.category == "kernel";
  }
  const int64_t ranges = 4, clock_reads = 8;  // the trainer's RecordFunctions and RunMonitor marks per step

  const double rf_ns = ns_per(1000000, [] { profiler::RecordFunction r("x"); });
  const double clock_ns = ns_per(1000000, [] { (void)std::chrono::steady_clock::now(); });
  Allocator& plain = allocator_for(DeviceType::CPU);
  const double plain_ns = ns_per(200000, [&] { plain.deallocate(plain.allocate(4096, kCPU), 4096, kCPU); });
  profiler::track_memory();
  Allocator& counted = allocator_for(DeviceType::CPU);
  const double counted_ns = ns_per(200000, [&] { counted.deallocate(counted.allocate(4096, kCPU), 4096, kCPU); });

  std::vector<double> times;
  for (int i = 0; i < 30; ++i) {
    double t = bench::now_s();
    step();
    times.push_back(bench::now_s() - t);
  }
  const double step_ns = bench::median(times) * 1e9;
  const double hooks_ns = static_cast<double>(ranges) * rf_ns + static_cast<double>(clock_reads) * clock_ns +
                          static_cast<double>(allocs) * std::max(0.0, counted_ns - plain_ns) +
                          static_cast<double>(nodes) * 1.0;  // one relaxed load per backward node
  std::printf("per step: %lld kernel calls, %lld allocations, %lld backward nodes\n", static_cast<long long>(kernels),
              static_cast<long long>(allocs), static_cast<long long>(nodes));
  std::printf("inactive RecordFunction %.1f ns, clock read %.1f ns, alloc+free %.1f ns plain / %.1f ns counted\n",
              rf_ns, clock_ns, plain_ns, counted_ns);
  std::printf("step %.3f ms (median of 30); hooks when off %.2f us = %.4f%% of the step\n", step_ns / 1e6,
              hooks_ns / 1e3, 100 * hooks_ns / step_ns);
  nlohmann::ordered_json line = {{"bench", "profiler_overhead"},
                                 {"step_ms", step_ns / 1e6},
                                 {"off_hooks_us", hooks_ns / 1e3},
                                 {"off_overhead_pct", 100 * hooks_ns / step_ns}};
  host.finish(line);
  std::printf("%s\n", line.dump().c_str());
  return 0;
}
