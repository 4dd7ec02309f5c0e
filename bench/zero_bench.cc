// ZeRO stage 1 against plain DDP: optimizer-state bytes held by each rank, and step time, on N
// real processes (127.0.0.1, Gloo, one compute thread each) for the 784-2048x3-10 MLP (38 MB of
// f32 parameters). Each rank measures the state its optimizer holds after the steps (every
// state tensor: moments, momentum buffers, step counters); rank 0 gathers and prints them, with
// the ratio ZeRO/DDP beside the ideal 1/N, and each mode's peak of live tensor bytes per rank over
// its run (everything: parameters, gradient buckets, shards, state, activations, temporaries;
// the modes run one after the other, so neither counts the other's). The last line is JSON.
//   tools/bazel run //bench:zero_bench [-- --nproc 2,4 --steps 5]
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/autograd.h"
#include "bench/host_check.h"
#include "bench/local_job.h"
#include "bench/timing.h"
#include "core/util/cli.h"
#include "core/generator.h"
#include "core/memory/memory_tracker.h"
#include "core/ops.h"
#include "distributed/backend/init.h"
#include "distributed/data_parallel/ddp.h"
#include "distributed/data_parallel/zero.h"
#include "distributed/launch/local_ranks.h"
#include "models/mlp_cnn.h"
#include "optim/adam.h"
#include "optim/sgd.h"

using namespace kiln;

namespace {

int64_t state_bytes(const optim::Optimizer& opt) {
  int64_t bytes = 0;
  for (int64_t i = 0; i < opt.num_params(); ++i)
    for (const auto& [name, t] : opt.state(i)) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

dist::OptimizerFactory factory(const std::string& name) {
  if (name == "sgd") return dist::optimizer_factory<optim::SGD>(optim::SGDOptions(0.01).set_momentum(0.9));
  return dist::optimizer_factory<optim::AdamW>(optim::AdamOptions(1e-3));
}

/// Median step time (ms) of `steps` steps after one warm-up.
double time_steps(dist::DistributedDataParallel& ddp, optim::Optimizer& opt, dist::ProcessGroup& pg, int steps) {
  Tensor x = randn({128, 1, 28, 28}), y = randint(0, 10, {128});
  std::vector<double> ms;
  for (int s = 0; s <= steps; ++s) {
    pg.barrier()->wait();
    const double t0 = bench::now_s();
    opt.zero_grad();
    nn::functional::cross_entropy(ddp(x), y).backward();
    opt.step();
    if (s > 0) ms.push_back((bench::now_s() - t0) * 1e3);
  }
  return bench::median(ms);
}

/// Every rank's value, on every rank.
std::vector<double> gather(dist::ProcessGroup& pg, double v) {
  Tensor all = zeros({pg.size()}, dtype(kFloat64));
  pg.allgather_into_tensor(all, full({1}, v, dtype(kFloat64)))->wait();
  return all.to_vector<double>();
}

struct Measured {
  double step_ms = 0;
  std::vector<double> state_bytes;  // every rank's
  std::vector<double> peak_bytes;   // every rank's peak of live tensor bytes over the run
};

/// One mode on its own (the other's tensors freed): a fresh model, DDP, the optimizer `make`
/// builds, `steps` timed steps after a warm-up.
Measured measure(const std::shared_ptr<dist::ProcessGroup>& pg, CpuMemoryTracker& tracker, int steps,
                 const std::function<std::unique_ptr<optim::Optimizer>(dist::DistributedDataParallel&)>& make,
                 const std::function<int64_t(const optim::Optimizer&)>& state_of) {
  const size_t base = tracker.live_bytes();
  tracker.reset_peak();
  manual_seed(0);
  auto model = models::make_wide_mlp(2048);
  dist::DistributedDataParallel ddp(model, pg);
  std::unique_ptr<optim::Optimizer> opt = make(ddp);
  Measured m;
  m.step_ms = time_steps(ddp, *opt, *pg, steps);
  m.state_bytes = gather(*pg, static_cast<double>(state_of(*opt)));
  m.peak_bytes = gather(*pg, static_cast<double>(tracker.peak_bytes() - base));
  return m;
}

void run(int steps, nlohmann::ordered_json* out) {
  CpuMemoryTracker tracker;  // before the process group's threads exist
  auto pg = dist::init_process_group();
  const int n = pg->size();
  for (std::string name : {"adamw", "sgd"}) {
    const Measured ddp = measure(pg, tracker, steps, [&](dist::DistributedDataParallel& d) {
      return factory(name)({optim::ParamGroup(d.parameters())});
    }, state_bytes);
    const Measured zero = measure(pg, tracker, steps, [&](dist::DistributedDataParallel& d) {
      return std::make_unique<dist::ZeroRedundancyOptimizer>(d, factory(name));
    }, [](const optim::Optimizer& o) { return static_cast<const dist::ZeroRedundancyOptimizer&>(o).state_bytes(); });
    const double mb = 1 << 20, params_mb = static_cast<double>(models::make_wide_mlp(2048)->num_parameters()) * 4 / mb;
    if (pg->rank() != 0) continue;
    const double zmax = *std::max_element(zero.state_bytes.begin(), zero.state_bytes.end());
    const double zmin = *std::min_element(zero.state_bytes.begin(), zero.state_bytes.end());
    const double ratio = zmax / ddp.state_bytes[0];
    const double ddp_peak = *std::max_element(ddp.peak_bytes.begin(), ddp.peak_bytes.end());
    const double zero_peak = *std::max_element(zero.peak_bytes.begin(), zero.peak_bytes.end());
    fmt::print("{:2} ranks {:6} params {:6.1f} MB | optimizer state per rank: DDP {:7.2f} MB, ZeRO-1 {:6.2f}-{:6.2f} MB "
               "= {:.4f} of DDP (ideal 1/{} = {:.4f}) | peak live tensors per rank: DDP {:7.2f} MB, ZeRO-1 "
               "{:7.2f} MB | step DDP {:7.1f} ms, ZeRO-1 {:7.1f} ms\n",
               n, name, params_mb, ddp.state_bytes[0] / mb, zmin / mb, zmax / mb, ratio, n, 1.0 / n, ddp_peak / mb,
               zero_peak / mb, ddp.step_ms, zero.step_ms);
    std::fflush(stdout);
    out->push_back({{"ranks", n},
                    {"optimizer", name},
                    {"params_mb", params_mb},
                    {"ddp_state_mb_per_rank", ddp.state_bytes[0] / mb},
                    {"zero_state_mb_per_rank_max", zmax / mb},
                    {"zero_state_mb_per_rank_min", zmin / mb},
                    {"ratio", ratio},
                    {"ideal_ratio", 1.0 / n},
                    {"ddp_peak_live_mb_per_rank", ddp_peak / mb},
                    {"zero_peak_live_mb_per_rank", zero_peak / mb},
                    {"ddp_step_ms", ddp.step_ms},
                    {"zero_step_ms", zero.step_ms}});
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> nprocs = {2, 4};
  int steps = 5;
  cli::App app("ZeRO-1 vs DDP: optimizer-state bytes and peak live tensor bytes per rank, and step time.", "zero_bench");
  app.add_option("--nproc", nprocs, "world sizes to run (ignored under a launcher)")->delimiter(',');
  app.add_option("--steps", steps, "timed steps per mode (the median is reported)")->check(cli::range(1, 100000));
  bool allow_load = false;
  app.add_flag("--allow-load", allow_load, bench::kAllowLoadHelp);
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  std::optional<bench::HostCheck> host;  // null in a launched rank other than 0
  if (bench::leads_job()) {
    host.emplace("zero_bench", allow_load);
    if (!host->may_report()) return bench::kLoadedExitCode;
  }
  // Rank 0's JSON line of one world size, the host (load average at its end) added.
  auto print_line = [&](const nlohmann::ordered_json& results) {
    nlohmann::ordered_json line = {{"benchmark", "zero"}, {"results", results}};
    if (host) host->finish(line);
    fmt::print("{}\n", line.dump());
  };
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  if (dist::launched_with_world()) {
    run(steps, &results);
    if (dist::get_rank() == 0) print_line(results);
    return 0;
  }
  fmt::print("ZeRO-1 vs DDP, wide MLP 784-2048x3-10, batch 128 per rank, Gloo on 127.0.0.1, 1 thread per rank\n");
  std::fflush(stdout);
  for (int n : nprocs) {
    // Each run's rank 0 prints its lines (forked: the parent's JSON collects nothing from them);
    // the JSON line is printed by rank 0 of each run.
    auto r = dist::run_local_ranks(n, [&](int rank, int) {
      nlohmann::ordered_json mine = nlohmann::ordered_json::array();
      run(steps, &mine);
      if (rank == 0) print_line(mine);
    }, {.timeout_s = 1800});
    for (size_t i = 0; i < r.size(); ++i)
      if (r[i].exit_code != 0) {
        std::fprintf(stderr, "zero_bench: rank %zu of %d failed\n", i, n);
        return 1;
      }
  }
  return 0;
}
