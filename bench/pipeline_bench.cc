// Pipeline-parallel step time and bubble over the number of micro-batches, GPipe and 1F1B, on p
// real processes (127.0.0.1, Gloo, one compute thread each): an MLP of 16 layers (8 x Linear(512,
// 512) + Tanh) split by parameter count, 32 rows per micro-batch (so a step does m micro-batches'
// work). The measured bubble is the share of the step a stage spent blocked on receives and
// sends, averaged over stages, beside the ideal (p-1)/(m+p-1); the step time is rank 0's
// zero_grad + train_step + optimizer step. Rank 0 prints; the last line is JSON.
//   tools/bazel run //bench:pipeline_bench [-- --stages 2 --steps 10 --micro 1,2,4,8,16]
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "autograd/autograd.h"
#include "bench/local_job.h"
#include "bench/timing.h"
#include "core/generator.h"
#include "core/ops.h"
#include "distributed/init.h"
#include "distributed/pipeline.h"
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

void run(int steps, const std::vector<int>& micro) {
  auto pg = dist::init_process_group();
  const int p = pg->size();
  std::string json;
  if (pg->rank() == 0) {
    fmt::print("Pipeline step, {} stages x 1 thread, Gloo on 127.0.0.1, MLP 16 layers (8 x 512x512), {} rows per "
               "micro-batch; median of {} steps\n",
               p, kRows, steps);
    fmt::print("{:6} {:>3} {:>9} {:>12} {:>9} {:>9} {:>8}\n", "sched", "m", "step ms", "samples/s", "bubble",
               "ideal", "ratio");
  }
  for (dist::Schedule sched : {dist::Schedule::kGPipe, dist::Schedule::k1F1B}) {
    for (int m : micro) {
      dist::PipelineOptions o;
      o.micro_batches = m;
      o.schedule = sched;
      dist::Pipeline pipe(make_model(), pg, o);
      optim::SGD opt(pipe.parameters(), optim::SGDOptions(0.001));
      Generator g(1);
      Tensor x = randn({m * kRows, kWidth}, {}, &g), y = randn({m * kRows, kWidth}, {}, &g);
      auto mse = [](const Tensor& out, const Tensor& t) { return nn::functional::mse_loss(out, t); };
      std::vector<double> step_ms, bubble;
      for (int s = 0; s < steps + 1; ++s) {
        const double t0 = bench::now_s();
        opt.zero_grad();
        pipe.train_step(x, y, mse);
        opt.step();
        const double seconds = bench::now_s() - t0;
        // Idle share of this stage's step, averaged over stages.
        Tensor share = full({1}, pipe.stats().wait_seconds / pipe.stats().step_seconds, dtype(kFloat64));
        pg->allreduce(share)->wait();
        if (s == 0) continue;  // warm-up (and the first step's shape negotiation)
        step_ms.push_back(seconds * 1e3);
        bubble.push_back(share.item<double>() / p);
      }
      const double ms = median(step_ms), b = median(bubble), ideal = double(p - 1) / (m + p - 1);
      if (pg->rank() == 0) {
        fmt::print("{:6} {:3} {:9.2f} {:12.0f} {:8.1f}% {:8.1f}% {:8.2f}\n", dist::schedule_name(sched), m, ms,
                   m * kRows / (ms / 1e3), 100 * b, 100 * ideal, ideal > 0 ? b / ideal : 0.0);
        json += fmt::format("{}{{\"schedule\": \"{}\", \"micro_batches\": {}, \"step_ms\": {:.3f}, \"bubble\": {:.4f}, "
                            "\"ideal_bubble\": {:.4f}}}",
                            json.empty() ? "" : ", ", dist::schedule_name(sched), m, ms, b, ideal);
      }
    }
  }
  if (pg->rank() == 0) fmt::print("{{\"benchmark\": \"pipeline\", \"stages\": {}, \"results\": [{}]}}\n", p, json);
}

}  // namespace

int main(int argc, char** argv) {
  int stages = 2, steps = 10;
  std::vector<int> micro = {1, 2, 4, 8, 16};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--stages") {
      stages = std::atoi(argv[i + 1]);
    } else if (a == "--steps") {
      steps = std::atoi(argv[i + 1]);
    } else if (a == "--micro") {
      micro.clear();
      std::stringstream ss(argv[i + 1]);
      for (std::string v; std::getline(ss, v, ',');) micro.push_back(std::atoi(v.c_str()));
    } else {
      std::fprintf(stderr, "usage: pipeline_bench [--stages P] [--steps S] [--micro 1,2,4,...]\n");
      return 2;
    }
  }
  return bench::run_on_ranks(stages, [&] { run(steps, micro); }, "pipeline_bench");
}
