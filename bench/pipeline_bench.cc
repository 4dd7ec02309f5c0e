// Pipeline-parallel step time and bubble over the number of micro-batches, GPipe, 1F1B and
// interleaved 1F1B (v virtual stages per rank, for m a multiple of p), on p real processes
// (127.0.0.1, Gloo, one compute thread each): an MLP of 16 layers (8 x Linear(512, 512) + Tanh)
// split by parameter count, 32 rows per micro-batch (so a step does m micro-batches'
// work). The measured bubble is the share of the pipeline's step (the longest stage's
// train_step) a stage spends not computing (forward and backward), averaged over stages, beside
// the ideal (p-1)/(m+p-1) of equal stages ((p-1)/(v*m+p-1) interleaved) and the "model" bubble:
// the (virtual) stages' mean forward and backward times replayed through the schedule with free
// communication (dist::simulated_step_time), the idle share unequal stages cannot avoid; and the
// "replay" bubble: every action's own measured time replayed the same way
// (dist::replayed_step_time), which adds the compute's jitter from one micro-batch to the next.
// What the measured bubble has beyond the replay is communication and bookkeeping.
// The step time is rank 0's zero_grad + train_step + optimizer step. --breakdown prints each
// stage's step split into waits and compute. Rank 0 prints; the last line is JSON.
//   tools/bazel run //bench:pipeline_bench [-- --stages 2 --steps 10 --micro 1,2,4,8,16 --virtual-stages 2]
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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
#include "core/ops.h"
#include "distributed/backend/init.h"
#include "distributed/pipeline/pipeline.h"
#include "nn/nn.h"
#include "optim/sgd.h"

using namespace kiln;
using kiln::bench::median;

namespace {

constexpr int64_t kWidth = 512, kRows = 32;

std::shared_ptr<nn::Sequential> make_model() {
  manual_seed(0);
  auto m = std::make_shared<nn::Sequential>();
  for (int i = 0; i < 8; ++i) {
    m->push_back(std::make_shared<nn::Linear>(kWidth, kWidth));
    m->push_back(std::make_shared<nn::Tanh>());
  }
  return m;
}

// This process's CPU time (all threads, ms) and context switches (voluntary + involuntary: the
// thread wake-ups a transfer costs show here whatever else runs on the machine).
struct Usage {
  double cpu_ms;
  double switches;
};
Usage usage() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto ms = [](const timeval& t) { return 1e3 * static_cast<double>(t.tv_sec) + 1e-3 * static_cast<double>(t.tv_usec); };
  return {ms(u.ru_utime) + ms(u.ru_stime), static_cast<double>(u.ru_nvcsw + u.ru_nivcsw)};
}

// One stage's step split by kind (PipelineStats), in ms: blocked on the header, activations,
// gradients and sends; computing forwards and backwards; the rest (bookkeeping, posting); then
// the process's CPU ms and context switches over the step.
constexpr int kKinds = 9;
void fill_breakdown(const dist::PipelineStats& st, const Usage& used, double* v) {
  v[7] += used.cpu_ms;
  v[8] += used.switches;
  const double parts[6] = {st.header_wait,     st.activation_wait, st.gradient_wait,
                           st.send_wait,       st.forward_seconds, st.backward_seconds};
  double rest = st.step_seconds;
  for (int k = 0; k < 6; ++k) {
    v[k] += 1e3 * parts[k];
    rest -= parts[k];
  }
  v[6] += 1e3 * rest;
}

/// `host`: the start process's host check (null in a launched rank other than 0); rank 0
/// finishes it into the JSON line.
void run(int steps, const std::vector<int>& micro, int chunks, bool breakdown, bench::HostCheck* host) {
  auto pg = dist::init_process_group();
  const int p = pg->size();
  std::string json;
  if (pg->rank() == 0) {
    fmt::print("Pipeline step, {} stages x 1 thread, Gloo on 127.0.0.1, MLP 16 layers (8 x 512x512), {} rows per "
               "micro-batch; median of {} steps\n",
               p, kRows, steps);
    fmt::print("{:13} {:>3} {:>9} {:>12} {:>9} {:>9} {:>8} {:>9} {:>9}\n", "sched", "m", "step ms", "samples/s",
               "bubble", "ideal", "ratio", "model", "replay");
  }
  std::vector<dist::Schedule> schedules = {dist::Schedule::kGPipe, dist::Schedule::k1F1B};
  if (chunks > 1) schedules.push_back(dist::Schedule::kInterleaved1F1B);
  for (dist::Schedule sched : schedules) {
    const int v = sched == dist::Schedule::kInterleaved1F1B ? chunks : 1;
    const std::string label = v == 1 ? dist::schedule_name(sched) : fmt::format("{}/{}", dist::schedule_name(sched), v);
    for (int m : micro) {
      if (v > 1 && m % p != 0) continue;  // interleaving takes the micro-batches p at a time
      dist::PipelineOptions o;
      o.micro_batches = m;
      o.schedule = sched;
      o.virtual_stages = v;
      dist::Pipeline pipe(make_model(), pg, o);
      optim::SGD opt(pipe.parameters(), optim::SGDOptions(0.001));
      Generator g(1);
      Tensor x = randn({m * kRows, kWidth}, {}, &g), y = randn({m * kRows, kWidth}, {}, &g);
      auto mse = [](const Tensor& out, const Tensor& t) { return nn::functional::mse_loss(out, t); };
      std::vector<double> step_ms, bubble, replay;
      const int n_actions = 2 * m * v;  // per stage: a forward and a backward per micro-batch and chunk
      Tensor parts = zeros({p, kKinds}, dtype(kFloat64));  // every stage's breakdown, summed over steps
      Tensor costs = zeros({2, p * v}, dtype(kFloat64));   // every virtual stage's forward and backward
      for (int s = 0; s < steps + 1; ++s) {
        const Usage u0 = usage();
        const double t0 = bench::now_s();
        opt.zero_grad();
        pipe.train_step(x, y, mse);
        opt.step();
        const double seconds = bench::now_s() - t0;
        const Usage u1 = usage();
        // The bubble: the share of the pipeline's step (the longest stage's train_step; every stage
        // starts it together after the all-reduce below) that a stage does not spend computing,
        // averaged over stages. Waiting, posting transfers and bookkeeping all count as idle, and
        // so does a stage's time after its own last action while the others drain.
        // Every stage's compute and step seconds, then its actions' compute seconds.
        Tensor times = zeros({2 * p + p * n_actions}, dtype(kFloat64));
        double* tv = times.data_ptr<double>();
        tv[pg->rank()] = pipe.stats().forward_seconds + pipe.stats().backward_seconds;
        tv[p + pg->rank()] = pipe.stats().step_seconds;
        std::copy(pipe.stats().action_seconds.begin(), pipe.stats().action_seconds.end(),
                  tv + 2 * p + pg->rank() * n_actions);
        pg->allreduce(times)->wait();
        tv = times.data_ptr<double>();
        double busy = 0, pipeline_step = 0;
        for (int r = 0; r < p; ++r) busy += tv[r] / p, pipeline_step = std::max(pipeline_step, tv[p + r]);
        if (s == 0) continue;  // warm-up (and the first step's shape negotiation)
        std::vector<std::vector<double>> actions(p);
        for (int r = 0; r < p; ++r) actions[r].assign(tv + 2 * p + r * n_actions, tv + 2 * p + (r + 1) * n_actions);
        replay.push_back(1 - busy / dist::replayed_step_time(sched, m, actions, v));
        fill_breakdown(pipe.stats(), {u1.cpu_ms - u0.cpu_ms, u1.switches - u0.switches},
                       parts.data_ptr<double>() + pg->rank() * kKinds);
        for (int c = 0; c < v; ++c) {
          costs.data_ptr<double>()[c * p + pg->rank()] += 1e3 * pipe.stats().chunk_forward_seconds[c];
          costs.data_ptr<double>()[p * v + c * p + pg->rank()] += 1e3 * pipe.stats().chunk_backward_seconds[c];
        }
        step_ms.push_back(seconds * 1e3);
        bubble.push_back(1 - busy / pipeline_step);
      }
      const double ms = median(step_ms), b = median(bubble), ideal = double(p - 1) / (v * m + p - 1);
      pg->allreduce(parts)->wait();
      pg->allreduce(costs)->wait();
      // The bubble the schedule cannot avoid on this model: its virtual stages' measured compute
      // replayed with free communication (unequal stages idle more than the ideal).
      std::vector<double> fwd(p * v), bwd(p * v);
      double busy = 0;
      for (int k = 0; k < p * v; ++k) {
        fwd[k] = costs.data_ptr<double>()[k] / steps / m;
        bwd[k] = costs.data_ptr<double>()[p * v + k] / steps / m;
        busy += m * (fwd[k] + bwd[k]) / p;
      }
      const double sim = 1 - busy / dist::simulated_step_time(sched, m, fwd, bwd, v);
      const double* pv = parts.data_ptr<double>();
      if (breakdown) {
        for (int r = 0; r < p && pg->rank() == 0; ++r)
          fmt::print("  stage {} mean ms: header {:.2f} act {:.2f} grad {:.2f} send {:.2f} | fwd {:.2f} bwd {:.2f} "
                     "other {:.2f} | process cpu {:.2f} ms, {:.1f} context switches\n",
                     r, pv[r * kKinds] / steps, pv[r * kKinds + 1] / steps, pv[r * kKinds + 2] / steps,
                     pv[r * kKinds + 3] / steps, pv[r * kKinds + 4] / steps, pv[r * kKinds + 5] / steps,
                     pv[r * kKinds + 6] / steps, pv[r * kKinds + 7] / steps, pv[r * kKinds + 8] / steps);
      }
      if (pg->rank() == 0) {
        fmt::print("{:13} {:3} {:9.2f} {:12.0f} {:8.1f}% {:8.1f}% {:8.2f} {:8.1f}% {:8.1f}%\n", label, m, ms,
                   m * kRows / (ms / 1e3), 100 * b, 100 * ideal, ideal > 0 ? b / ideal : 0.0, 100 * sim,
                   100 * median(replay));
        json += fmt::format("{}{{\"schedule\": \"{}\", \"virtual_stages\": {}, \"micro_batches\": {}, \"step_ms\": "
                            "{:.3f}, \"bubble\": {:.4f}, \"ideal_bubble\": {:.4f}, \"model_bubble\": {:.4f}, "
                            "\"replay_bubble\": {:.4f}}}",
                            json.empty() ? "" : ", ", dist::schedule_name(sched), v, m, ms, b, ideal, sim,
                            median(replay));
      }
    }
  }
  if (pg->rank() == 0) {
    auto line = nlohmann::ordered_json::parse(
        fmt::format("{{\"benchmark\": \"pipeline\", \"stages\": {}, \"results\": [{}]}}", p, json));
    if (host) host->finish(line);
    fmt::print("{}\n", line.dump());
  }
}

}  // namespace

int main(int argc, char** argv) {
  int stages = 2, steps = 10;
  std::vector<int> micro = {1, 2, 4, 8, 16};
  int chunks = 2;
  cli::App app("Pipeline step time and bubble fraction over micro-batch counts, GPipe, 1F1B and interleaved 1F1B.",
               "pipeline_bench");
  app.add_option("--stages", stages, "pipeline stages (one rank each)")->check(cli::range(2, 64));
  app.add_option("--steps", steps, "timed steps per configuration (the median is reported)")
      ->check(cli::range(1, 100000));
  app.add_option("--micro", micro, "micro-batch counts, comma separated")
      ->delimiter(',')
      ->check(cli::range(1, 4096));
  app.add_option("--virtual-stages", chunks,
                 "model chunks per rank for the interleaved rows (micro-batch counts that are multiples of the "
                 "stages); 1: no interleaved rows")
      ->check(cli::range(1, 8));
  bool breakdown = false;
  app.add_flag("--breakdown", breakdown, "print each stage's mean step split into waits and compute");
  bool allow_load = false;
  app.add_flag("--allow-load", allow_load, bench::kAllowLoadHelp);
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  std::optional<bench::HostCheck> host;
  if (bench::leads_job()) {
    host.emplace("pipeline_bench", allow_load);
    if (!host->may_report()) return bench::kLoadedExitCode;
  }
  bench::HostCheck* host_ptr = host ? &*host : nullptr;
  return bench::run_on_ranks(stages, [&] { run(steps, micro, chunks, breakdown, host_ptr); }, "pipeline_bench");
}
