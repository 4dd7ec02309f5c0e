// Predicts data-parallel step time and scaling efficiency from an α-β model of all-reduce
// (bench/scaling_math.h): fits α and B to //bench:allreduce_bench measurements, times a model's
// forward, backward (with the moment each DDP gradient bucket becomes ready) and optimizer step
// in one process, predicts the DDP step on n ranks with communication overlapped with backward,
// and checks the prediction against //bench:ddp_bench measurements. Then projects 8-512 GPUs on
// stated NVLink/InfiniBand figures for ResNet-50- and GPT-2-124M-sized gradients.
//   bazel-bin/bench/scaling_model --allreduce ar.jsonl --ddp ddp.jsonl [--cores 2]
// The JSON-lines files hold the benchmarks' last lines (optionally with a "link" tag, as
// bench/multinode_allreduce.sh writes); an all-reduce line validates the DDP lines with the
// same ranks and link.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/scaling_math.h"
#include "bench/timing.h"
#include "core/cli.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "distributed/ddp.h"
#include "distributed/init.h"
#include "distributed/rendezvous.h"
#include "examples/models.h"
#include "nn/functional.h"
#include "optim/sgd.h"

using namespace kiln;
using bench::AlphaBeta;
using bench::median;
using bench::now_s;

namespace {

std::shared_ptr<nn::Module> make(const std::string& name) {
  return name == "wide_mlp" ? std::shared_ptr<nn::Module>(examples::make_wide_mlp(2048))
                            : std::shared_ptr<nn::Module>(examples::make_model(name));
}

/// One process, this thread count: forward, backward with each bucket's ready time, optimizer
/// (medians over `steps`); buckets as DistributedDataParallel makes them (its default options),
/// batch 128 of 1x28x28 as ddp_bench.
bench::StepProfile profile(const std::string& name, std::shared_ptr<dist::ProcessGroup> one, int steps) {
  manual_seed(0);
  auto model = make(name);
  std::vector<std::vector<std::string>> buckets;
  {
    dist::DistributedDataParallel ddp(model, one);
    buckets = ddp.bucket_names();
  }
  std::map<std::string, size_t> param_index;
  std::vector<Tensor> params;
  for (auto& [pname, p] : model->named_parameters()) {
    param_index[pname] = params.size();
    params.push_back(p);
  }
  std::vector<double> ready(params.size(), 0);
  for (size_t i = 0; i < params.size(); ++i)
    params[i].register_post_accumulate_grad_hook([&ready, i](const Tensor&) { ready[i] = now_s(); });
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.01).set_momentum(0.9));
  Tensor x = randn({128, 1, 28, 28});
  Tensor y = randint(0, 10, {128});
  std::vector<double> fwd, bwd, upd;
  std::vector<std::vector<double>> bucket_ready(buckets.size());
  for (int s = 0; s < steps + 1; ++s) {
    opt.zero_grad();
    double t0 = now_s();
    Tensor loss = nn::functional::cross_entropy((*model)(x), y);
    double t1 = now_s();
    loss.backward();
    double t2 = now_s();
    opt.step();
    double t3 = now_s();
    if (s == 0) continue;  // warm-up
    fwd.push_back(t1 - t0);
    bwd.push_back(t2 - t1);
    upd.push_back(t3 - t2);
    for (size_t b = 0; b < buckets.size(); ++b) {
      double last = t1;
      for (auto& pname : buckets[b]) last = std::max(last, ready[param_index.at(pname)]);
      bucket_ready[b].push_back(last - t1);
    }
  }
  bench::StepProfile p{median(fwd), median(bwd), median(upd), {}};
  for (size_t b = 0; b < buckets.size(); ++b) {
    double bytes = 0;
    for (auto& pname : buckets[b]) bytes += static_cast<double>(params[param_index.at(pname)].numel()) * 4;
    p.buckets.push_back({median(bucket_ready[b]), bytes});
  }
  return p;
}

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  if (path.empty()) return out;
  std::ifstream f(path);
  KILN_CHECK(f.good(), "scaling_model: cannot read '{}'", path);
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.find('{') == std::string::npos) continue;
    try {
      out.push_back(nlohmann::json::parse(line.substr(line.find('{'))));
    } catch (const std::exception& e) {
      fail("scaling_model: {} line {} is not JSON: {}", path, n, e.what());
    }
  }
  return out;
}

std::string link_of(const nlohmann::json& j) { return j.value("link", std::string("loopback")); }

/// α-β fits of every all-reduce line, keyed by (ranks, link); messages >= 64 KiB.
std::map<std::pair<int, std::string>, AlphaBeta> fit_all(const std::vector<nlohmann::json>& lines) {
  std::map<std::pair<int, std::string>, AlphaBeta> fits;
  fmt::print("α-β fits of all-reduce (t = 2(n-1)α + 2(n-1)/n·bytes/B, sizes >= 64 KiB)\n");
  fmt::print("{:>6} {:>10} {:>10} {:>12} {:>10}\n", "ranks", "link", "α us", "B GB/s", "max err");
  for (const auto& j : lines) {
    const int n = j.at("ranks");
    if (n < 2 || j.value("layout", std::string()).find("hierarchical") != std::string::npos) continue;
    std::vector<std::pair<double, double>> pts;
    for (const auto& r : j.at("results")) pts.push_back({r.at("bytes").get<double>(), r.at("us").get<double>() * 1e-6});
    AlphaBeta m = bench::fit_allreduce(pts, n, 65536);
    double worst = 0;
    for (auto [x, t] : pts)
      if (x >= 65536) worst = std::max(worst, std::abs(bench::allreduce_seconds(m, n, x) - t) / t);
    fits[{n, link_of(j)}] = m;
    fmt::print("{:>6} {:>10} {:>10.1f} {:>12.4f} {:>9.0f}%\n", n, link_of(j), m.alpha_s * 1e6, m.bus_bytes_per_s / 1e9,
               worst * 100);
  }
  return fits;
}

/// Per DDP line and model: the prediction with compute from the one-process profile (stretched by
/// max(1, n / cores)), and with compute taken from the same run's no-overlap mode (its step minus
/// its communication), which checks the communication and overlap part of the model alone.
void validate(const std::vector<nlohmann::json>& ddp_lines,
              const std::map<std::pair<int, std::string>, AlphaBeta>& fits,
              const std::map<std::string, bench::StepProfile>& profiles, int cores) {
  fmt::print("\nDDP step (overlapped): predicted vs measured by ddp_bench\n");
  fmt::print("{:>5} {:>9} {:>9} {:>10} {:>9} {:>8} {:>13} {:>8}\n", "ranks", "link", "model", "measured",
             "predicted", "error", "w/ run's cpu", "error");
  for (const auto& j : ddp_lines) {
    const int n = j.at("ranks");
    auto fit = fits.find({n, link_of(j)});
    if (n > 1 && fit == fits.end()) {
      fmt::print("{:>5} {:>9}   no all-reduce fit for this layout: skipped\n", n, link_of(j));
      continue;
    }
    for (const auto& r : j.at("results")) {
      const std::string model = r.at("model");
      auto p = profiles.find(model);
      if (p == profiles.end()) continue;
      const AlphaBeta link = n > 1 ? fit->second : AlphaBeta{0, 1};
      const auto& prof = p->second;
      const double one = prof.forward_s + prof.backward_s + prof.optimizer_s;
      auto pred = bench::predict_step(prof, link, n, std::max(1.0, static_cast<double>(n) / cores));
      const double cpu =
          (r.at("after_backward_step_ms").get<double>() - r.at("after_backward_comm_ms").get<double>()) / 1e3;
      auto calibrated = bench::predict_step(prof, link, n, cpu / one);
      const double measured = r.at("overlap_step_ms");
      fmt::print("{:>5} {:>9} {:>9} {:>10.2f} {:>9.2f} {:>+7.0f}% {:>13.2f} {:>+7.0f}%\n", n, link_of(j), model,
                 measured, pred.step_s * 1e3, (pred.step_s * 1e3 / measured - 1) * 100, calibrated.step_s * 1e3,
                 (calibrated.step_s * 1e3 / measured - 1) * 100);
    }
  }
}

/// Stated, sourced hardware and workload figures (docs/scaling.md lists the sources).
void project() {
  // DGX-A100-like nodes: 8 GPUs on NVLink (NCCL all-reduce busbw ~230 GB/s within a node),
  // one 200 Gb/s HDR InfiniBand NIC per GPU (25 GB/s; ~90% reachable) between nodes.
  const AlphaBeta nvlink{5e-6, 230e9}, infiniband{10e-6, 22.5e9};
  struct Work {
    const char* name;
    double params, step_s;  // compute per step on one GPU (forward + backward + optimizer)
  };
  // ResNet-50: 25.6M params, ~2,500 img/s on an A100 with AMP -> batch 256 in ~0.10 s.
  // GPT-2 124M: ~230k tokens/s per A100 (llm.c, 8xA100) -> 64 x 1024 tokens in ~0.28 s.
  const Work works[] = {{"ResNet-50 (25.6M, fp32 grads)", 25.6e6, 0.10}, {"GPT-2 124M (fp32 grads)", 124e6, 0.28}};
  fmt::print("\nProjection: weak scaling, fp32 gradients in 25 MB buckets ready evenly over backward (2/3 of the "
             "step), ring all-reduce;\nNVLink within 8-GPU nodes (α 5 us, B 230 GB/s), InfiniBand HDR between them "
             "(α 10 us, B 22.5 GB/s per GPU)\n");
  fmt::print("{:>32} {:>6} {:>10} {:>10} {:>11} {:>14}\n", "gradients", "GPUs", "comm ms", "exposed ms", "efficiency",
             "hierarchical");
  for (const Work& w : works)
    for (int n : {8, 16, 32, 64, 128, 256, 512}) {
      bench::StepProfile p;
      p.forward_s = w.step_s / 3 * 0.95;
      p.backward_s = w.step_s * 2 / 3;
      p.optimizer_s = w.step_s / 3 * 0.05;
      const double bytes = w.params * 4, cap = 25e6;
      const int k = static_cast<int>(std::ceil(bytes / cap));
      for (int b = 0; b < k; ++b) p.buckets.push_back({p.backward_s * (b + 1) / k, std::min(cap, bytes - b * cap)});
      auto pred = bench::predict_step(p, n <= 8 ? nvlink : infiniband, n);
      auto hier = bench::predict_step_with(
          p, [&](double b) { return bench::hierarchical_allreduce_seconds(nvlink, infiniband, 8, n, b); });
      fmt::print("{:>32} {:>6} {:>10.1f} {:>10.1f} {:>10.1f}% {:>13.1f}%\n", w.name, n, pred.comm_s * 1e3,
                 pred.exposed_s * 1e3, pred.efficiency * 100, hier.efficiency * 100);
    }
  fmt::print("hierarchical: reduce-scatter over NVLink, each GPU's 1/8 all-reduced across nodes on its own NIC, "
             "all-gather over NVLink (NCCL-style; Kiln's Gloo hierarchy uses one leader per node).\n");
  fmt::print("Published: Horovod 90% at 512 GPUs (Inception V3, ResNet-101; Pascal, 25 GbE RoCE); PyTorch DDP "
             "near-linear at 256 GPUs (Li et al., VLDB 2020).\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string allreduce_path, ddp_path;
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int steps = 10;
  bool no_profile = false;
  cli::App app("α-β model of all-reduce and of the DDP step: fit, validate, project.", "scaling_model");
  app.add_option("--allreduce", allreduce_path, "allreduce_bench JSON lines to fit α and B to");
  app.add_option("--ddp", ddp_path, "ddp_bench JSON lines to check the predictions against");
  app.add_option("--cores", cores, "cores the measured ranks shared (ranks beyond it slow compute)")
      ->check(cli::range(1, 4096));
  app.add_option("--steps", steps, "profiled steps per model (median)")->check(cli::range(1, 10000));
  app.add_flag("--projection-only", no_profile, "print only the 8-512 GPU projection");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    if (!no_profile) {
      set_num_threads(1);  // as ddp_bench's ranks
      auto fits = fit_all(read_lines(allreduce_path));
      auto one = dist::init_process_group(
          {.init_method = fmt::format("tcp://127.0.0.1:{}", dist::free_tcp_port()), .rank = 0, .world_size = 1});
      std::map<std::string, bench::StepProfile> profiles;
      fmt::print("\nOne-process profile (1 thread, batch 128): forward / backward / optimizer ms, "
                 "buckets (MB @ ready ms)\n");
      for (std::string m : {"mlp", "cnn", "wide_mlp"}) {
        profiles[m] = profile(m, one, steps);
        const auto& p = profiles[m];
        std::string b;
        for (auto& x : p.buckets) b += fmt::format(" {:.1f}@{:.1f}", x.bytes / 1e6, x.ready_s * 1e3);
        fmt::print("{:>9} {:7.2f} {:7.2f} {:7.2f} |{}\n", m, p.forward_s * 1e3, p.backward_s * 1e3,
                   p.optimizer_s * 1e3, b);
      }
      validate(read_lines(ddp_path), fits, profiles, cores);
    }
    project();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
