// DistributedDataParallel step time with gradient all-reduce overlapped with backward, against
// the same step with one all-reduce after backward, on 2 ranks (real processes, 127.0.0.1,
// Gloo), one compute thread each. Per model it reports the step time of both modes, the total
// communication time per step (the sum of the bucket all-reduces' run times), the exposed part
// (how long backward waited for communication after its graph walk ended) and the hidden
// fraction 1 - exposed/communication. A third mode times the model alone on every rank at once,
// with no communication (bench/step_profile.h: forward, backward with each bucket's ready time,
// optimizer; the slowest rank's), the compute input of //bench:scaling_model. A fourth times the
// ZeRO-1 step (dist::ZeroRedundancyOptimizer over the same SGD: gradients reduce-scattered during
// backward, the optimizer on this rank's shard, parameters all-gathered), on a copy of the model.
// Modes alternate in blocks so drifts hit all alike; the median block is reported. A block runs
// at least --steps steps and at least --min-block-ms (the small MLP's 2-3 ms steps would otherwise
// be timed over a few tens of ms, at the mercy of one scheduler hiccup). Rank 0 prints; the last
// line is JSON.
//   tools/bazel run //bench:ddp_bench [-- --nproc 2 --steps 20 --blocks 5 --min-block-ms 200]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "autograd/autograd.h"
#include "core/util/cli.h"
#include "core/generator.h"
#include "core/ops.h"
#include "distributed/backend/init.h"
#include "distributed/data_parallel/ddp.h"
#include "distributed/data_parallel/zero.h"
#include "distributed/launch/local_ranks.h"
#include "models/mlp_cnn.h"
#include "optim/sgd.h"
#include "bench/host_check.h"
#include "bench/local_job.h"
#include "bench/step_profile.h"
#include "bench/timing.h"

using namespace kiln;
using kiln::bench::median;
using kiln::bench::now_s;

namespace {

struct Mode {
  double step = 0, comm = 0, exposed = 0;
};

/// `host`: the start process's host check (in every forked rank; null in a launched rank other
/// than 0). Rank 0 finishes it into the JSON line.
void run(int min_steps, double min_block_ms, int blocks, bool bucket_view, bench::HostCheck* host) {
  auto pg = dist::init_process_group();
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  if (pg->rank() == 0) {
    fmt::print("DDP step time, {} ranks x 1 thread, Gloo on 127.0.0.1, batch 128 per rank, SGD; median of {} blocks "
               "of at least {} steps and {} ms; gradient_as_bucket_view {}\n",
               pg->size(), blocks, min_steps, min_block_ms, bucket_view ? "on" : "off");
    fmt::print("{:9} {:>9} {:>6} {:>11} {:>12} {:>9} {:>10} {:>9} {:>8} {:>9} {:>9}\n", "model", "grad MB", "steps",
               "overlap ms", "after-bwd ms", "speedup", "comm ms", "exposed", "hidden", "alone ms", "zero ms");
  }
  for (std::string name : {"mlp", "cnn", "wide_mlp"}) {
    manual_seed(0);
    // wide_mlp: 784-2048x3-10, whose 38 MB of gradients make communication matter.
    auto model = name == "wide_mlp" ? models::make_wide_mlp(2048) : models::make_model(name);
    dist::DDPOptions overlap;
    overlap.gradient_as_bucket_view = bucket_view;
    dist::DDPOptions after = overlap;
    after.overlap = false;
    dist::DistributedDataParallel overlapped(model, pg, overlap), one_shot(model, pg, after);
    const optim::SGDOptions sgd = optim::SGDOptions(0.01).set_momentum(0.9);
    optim::SGD opt(model->parameters(), sgd);
    manual_seed(0);  // ZeRO's copy of the model starts equal
    auto zero_model = name == "wide_mlp" ? models::make_wide_mlp(2048) : models::make_model(name);
    dist::DistributedDataParallel zero_ddp(zero_model, pg, overlap);
    dist::ZeroRedundancyOptimizer zero(zero_ddp, dist::optimizer_factory<optim::SGD>(sgd));
    Tensor x = randn({128, 1, 28, 28});
    Tensor y = randint(0, 10, {128});
    double grad_mb = static_cast<double>(model->num_parameters()) * 4 / (1 << 20);

    // One plain-optimizer step under either DDP mode.
    auto ddp_step = [&](dist::DistributedDataParallel& ddp) {
      opt.zero_grad();
      nn::functional::cross_entropy(ddp(x), y).backward();
      opt.step();
    };
    // Steps per block: enough for --min-block-ms at the overlapped step's pace (3 steps after a
    // first, untimed one; the slowest rank's), the same on every rank.
    double t_warm = 0;
    for (int s = 0; s < 4; ++s) {
      if (s == 1) t_warm = now_s();
      ddp_step(overlapped);
    }
    Tensor pace = full({1}, (now_s() - t_warm) / 3 * 1e3, dtype(kFloat64));
    pg->allreduce(pace, dist::ReduceOp::kMax)->wait();
    const int steps = std::max(min_steps, static_cast<int>(std::ceil(min_block_ms / pace.item<double>())));
    std::vector<double> step[2], comm[2], exposed[2], zero_step;
    std::vector<bench::StepProfile> compute;  // per block: the model alone, no communication
    // One timed block of a mode: a warm-up step (and the other modes' caches out of the way), the
    // ranks lined up, then `steps` steps, `after` reading each one's stats. Milliseconds per step.
    auto time_block = [&](const std::function<void()>& one_step, const std::function<void()>& after) {
      one_step();
      pg->barrier()->wait();
      const double t0 = now_s();
      for (int s = 0; s < steps; ++s) {
        one_step();
        if (after) after();
      }
      return (now_s() - t0) / steps * 1e3;
    };
    for (int b = 0; b < blocks; ++b)
      for (int m = 0; m < 4; ++m) {
        if (m == 2) {
          compute.push_back(bench::profile_compute(name, pg, steps));
          continue;
        }
        if (m == 3) {
          zero_step.push_back(time_block([&] {
            zero.zero_grad();
            nn::functional::cross_entropy(zero_ddp(x), y).backward();
            zero.step();
          }, nullptr));
          continue;
        }
        dist::DistributedDataParallel& ddp = m == 0 ? overlapped : one_shot;
        double c = 0, e = 0;
        step[m].push_back(time_block(
            [&] { ddp_step(ddp); },
            [&] {
              c += ddp.stats().comm_seconds;
              e += ddp.stats().exposed_seconds;
            }));
        comm[m].push_back(c / steps * 1e3);
        exposed[m].push_back(e / steps * 1e3);
      }
    Mode o{median(step[0]), median(comm[0]), median(exposed[0])};
    Mode a{median(step[1]), median(comm[1]), median(exposed[1])};
    const bench::StepProfile alone = bench::slowest_rank(bench::median_profile(compute), *pg);
    if (pg->rank() == 0) {
      double hidden = o.comm > 0 ? 1 - o.exposed / o.comm : 0;
      fmt::print("{:9} {:9.2f} {:6} {:11.2f} {:12.2f} {:8.2f}x {:10.2f} {:9.2f} {:7.0f}% {:9.2f} {:9.2f}\n", name,
                 grad_mb, steps, o.step, a.step, a.step / o.step, o.comm, o.exposed, 100 * hidden,
                 (alone.forward_s + alone.backward_s + alone.optimizer_s) * 1e3, median(zero_step));
      results.push_back({{"model", name},
                         {"grad_mb", grad_mb},
                         {"steps_per_block", steps},
                         {"overlap_step_ms", o.step},
                         {"after_backward_step_ms", a.step},
                         {"speedup", a.step / o.step},
                         {"comm_ms", o.comm},
                         {"exposed_ms", o.exposed},
                         {"after_backward_comm_ms", a.comm},
                         {"hidden_fraction", hidden},
                         {"zero_step_ms", median(zero_step)},
                         {"compute", bench::to_json(alone)}});
    }
  }
  if (pg->rank() == 0) {
    nlohmann::ordered_json line = {{"benchmark", "ddp"},
                                   {"ranks", pg->size()},
                                   {"gradient_as_bucket_view", bucket_view},
                                   {"results", results}};
    if (host) host->finish(line);
    fmt::print("{}\n", line.dump());
  }
}

}  // namespace

int main(int argc, char** argv) {
  int nproc = 2, steps = 20, blocks = 5;
  double min_block_ms = 200;
  bool bucket_view = true;
  cli::App app("DistributedDataParallel step time, all-reduce overlapped with backward or after it.", "ddp_bench");
  app.add_option("--nproc", nproc, "ranks to start (ignored under //distributed/launch)")->check(cli::range(1, 256));
  app.add_option("--steps", steps, "at least this many steps per timed block")->check(cli::range(1, 1000000));
  app.add_option("--min-block-ms", min_block_ms, "and at least this long per timed block (0: --steps alone)")
      ->check(cli::range(0.0, 1e6));
  app.add_option("--blocks", blocks, "timed blocks per mode (the median is reported)")->check(cli::range(1, 10000));
  app.add_option("--gradient-as-bucket-view", bucket_view,
                 "1: each .grad a view of its bucket (no copy back; the default); 0: copied in and out");
  bool allow_load = false;
  app.add_flag("--allow-load", allow_load, bench::kAllowLoadHelp);
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  std::optional<bench::HostCheck> host;
  if (bench::leads_job()) {
    host.emplace("ddp_bench", allow_load);
    if (!host->may_report()) return bench::kLoadedExitCode;
  }
  bench::HostCheck* host_ptr = host ? &*host : nullptr;
  if (dist::launched_with_world()) {
    run(steps, min_block_ms, blocks, bucket_view, host_ptr);
    return 0;
  }
  auto results = dist::run_local_ranks(
      nproc, [&](int, int) { run(steps, min_block_ms, blocks, bucket_view, host_ptr); }, {.timeout_s = 1200});
  for (size_t r = 0; r < results.size(); ++r)
    if (results[r].exit_code != 0) {
      std::fprintf(stderr, "ddp_bench: rank %zu failed\n", r);
      return 1;
    }
  return 0;
}
