// Predicts data-parallel step time and scaling efficiency from an α-β model of all-reduce,
// reduce-scatter and all-gather (bench/scaling_math.h): fits α and B to //bench:allreduce_bench
// measurements (each --op), takes each model's forward, backward (with the moment each DDP
// gradient bucket becomes ready) and optimizer times by ddp_bench with as many ranks computing at
// once as its DDP runs had (bench/step_profile.h), predicts the DDP and ZeRO-1 steps on n ranks
// with communication overlapped with backward, and checks the predictions against
// //bench:ddp_bench measurements. Then projects 8-512 GPUs on stated NVLink/InfiniBand figures
// for ResNet-50- and GPT-2-124M-sized gradients, and past data parallel (FSDP, tensor parallel
// within a node) GPT-2 1.5B and a 7B model on 8-1,024 H100s beside Megatron-LM's published MFU.
//   bazel-bin/bench/scaling_model --allreduce ar.jsonl --ddp ddp.jsonl [--cores 2]
// The JSON-lines files hold the benchmarks' last lines (optionally with a "link" tag, as
// bench/multinode_allreduce.sh writes); an all-reduce line validates the DDP lines with the
// same ranks and link, reduce-scatter and all-gather lines the ZeRO-1 steps.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/scaling_math.h"
#include "bench/step_profile.h"
#include "core/util/cli.h"
#include "core/error.h"
#include "core/parallel.h"
#include "distributed/backend/init.h"
#include "distributed/store/rendezvous.h"

using namespace kiln;
using bench::AlphaBeta;

namespace {

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

/// α-β fits of every flat collective line (allreduce_bench --op; all-reduce when a line has no
/// "op"), keyed by (ranks, link, collective); messages >= 64 KiB.
using Fits = std::map<std::tuple<int, std::string, bench::Collective>, AlphaBeta>;
Fits fit_all(const std::vector<nlohmann::json>& lines) {
  Fits fits;
  fmt::print("α-β fits (ring: all-reduce t = 2(n-1)α + 2(n-1)/n·bytes/B; reduce-scatter and all-gather (n-1)α + "
             "(n-1)/n·bytes/B; sizes >= 64 KiB)\n");
  fmt::print("{:>6} {:>10} {:>15} {:>10} {:>12} {:>10}\n", "ranks", "link", "collective", "α us", "B GB/s", "max err");
  for (const auto& j : lines) {
    const int n = j.at("ranks");
    if (n < 2 || j.value("layout", std::string()).find("hierarchical") != std::string::npos) continue;
    const bench::Collective op = bench::parse_collective(j.value("op", std::string("allreduce")));
    std::vector<std::pair<double, double>> pts;
    for (const auto& r : j.at("results")) pts.push_back({r.at("bytes").get<double>(), r.at("us").get<double>() * 1e-6});
    AlphaBeta m = bench::fit_ring(op, pts, n, 65536);
    double worst = 0;
    for (auto [x, t] : pts)
      if (x >= 65536) worst = std::max(worst, std::abs(bench::collective_seconds(op, m, n, x) - t) / t);
    fits[{n, link_of(j), op}] = m;
    fmt::print("{:>6} {:>10} {:>15} {:>10.1f} {:>12.4f} {:>9.0f}%\n", n, link_of(j), bench::collective_name(op),
               m.alpha_s * 1e6, m.bus_bytes_per_s / 1e9, worst * 100);
  }
  return fits;
}

double total(const bench::StepProfile& p) { return p.forward_s + p.backward_s + p.optimizer_s; }

/// The share of the compute's wall time the rank ran on a core ("-" when not measured).
std::string on_cpu(const bench::StepProfile& p) {
  return p.cpu_s > 0 ? fmt::format("{:.0f}%", 100 * p.cpu_s / total(p)) : "-";
}

/// The one-rank compute of each model: from a 1-rank ddp_bench line's compute mode, else timed
/// here (one process, one thread).
std::map<std::string, bench::StepProfile> one_rank_profiles(const std::vector<nlohmann::json>& ddp_lines, int steps) {
  std::map<std::string, bench::StepProfile> out;
  for (const auto& j : ddp_lines)
    if (j.at("ranks") == 1)
      for (const auto& r : j.at("results"))
        if (r.contains("compute")) out[r.at("model")] = bench::step_profile_from_json(r.at("compute"));
  std::shared_ptr<dist::ProcessGroup> one;
  std::map<std::string, std::string> source;
  for (const std::string m : {"mlp", "cnn", "wide_mlp"}) {
    source[m] = out.count(m) ? "the 1-rank ddp_bench line" : "timed here";
    if (out.count(m)) continue;
    if (!one) {
      set_num_threads(1);  // as ddp_bench's ranks
      one = dist::init_process_group(
          {.init_method = fmt::format("tcp://127.0.0.1:{}", dist::free_tcp_port()), .rank = 0, .world_size = 1});
    }
    out[m] = bench::profile_compute(m, one, steps);
  }
  fmt::print("\nOne-rank compute (1 thread, batch 128): forward / backward / optimizer ms, on cpu, buckets "
             "(MB @ ready ms)\n");
  for (const auto& [m, p] : out) {
    std::string b;
    for (auto& x : p.buckets) b += fmt::format(" {:.1f}@{:.1f}", x.bytes / 1e6, x.ready_s * 1e3);
    fmt::print("{:>9} {:8.2f} {:8.2f} {:6.2f} {:>5} |{} ({})\n", m, p.forward_s * 1e3, p.backward_s * 1e3,
               p.optimizer_s * 1e3, on_cpu(p), b, source[m]);
  }
  return out;
}

/// A prediction's cell: the predicted ms (right-aligned in `width`) and its error against the
/// measured step; counts it in `hits` when within 15 %.
std::string error_cell(double predicted, double measured, int width, int& hits) {
  const double err = predicted / measured - 1;
  hits += std::abs(err) <= 0.15;
  return fmt::format("{:>{}.2f} {:>+5.0f}%", predicted * 1e3, width, err * 100);
}

/// Per model, a step's cost beyond its compute on one rank, where there is no communication: the
/// 1-rank ddp_bench line's `step_key` (ms) minus the compute it carries.
std::map<std::string, double> one_rank_overhead(const std::vector<nlohmann::json>& ddp_lines, const char* step_key) {
  std::map<std::string, double> out;
  for (const auto& j : ddp_lines)
    if (j.at("ranks") == 1)
      for (const auto& r : j.at("results"))
        if (r.contains("compute") && r.contains(step_key))
          out[r.at("model")] =
              r.at(step_key).get<double>() / 1e3 - total(bench::step_profile_from_json(r.at("compute")));
  return out;
}

/// Per DDP line and model, the step predicted with three compute inputs: the one-rank profile
/// stretched by max(1, n / cores) (ranks assumed to get whole cores, as GPUs would); the compute
/// ddp_bench timed on every rank at once, interleaved with its DDP blocks (the ranks' real
/// contention, no communication), alone and plus DDP's per-step overhead fitted on the 1-rank line
/// (n > 1 only: on one rank it is the fit); and the same run's no-overlap step minus its
/// communication (a check of the communication and overlap part of the model alone, not a
/// prediction).
void validate(const std::vector<nlohmann::json>& ddp_lines, const Fits& fits,
              const std::map<std::string, bench::StepProfile>& alone, int cores) {
  fmt::print("\nDDP step (overlapped), ms: measured by ddp_bench vs predicted from the 1-rank compute stretched by "
             "max(1, n/cores), from the compute at n ranks (\"vs 1\": over the 1-rank compute, in wall and in CPU "
             "time; \"on cpu\": its CPU time over its wall time), and from the run's own no-overlap step\n");
  fmt::print("\"+ overhead\": plus DDP's per-step cost without communication, fitted on the 1-rank line (its "
             "overlapped step minus its compute), for n > 1\n");
  fmt::print("{:>5} {:>9} {:>9} {:>9} | {:>16} {:>6} | {:>10} {:>6} | {:>10} {:>6} | {:>6} {:>6} {:>6} | {:>10} {:>6}\n",
             "ranks", "link", "model", "measured", "1-rank x stretch", "error", "at n ranks", "error", "+ overhead",
             "error", "vs 1", "cpu", "on cpu", "run's cpu", "error");
  // DDP's cost per step beyond compute and communication (hooks, the hand-off to the
  // communication thread and the wait for it).
  const std::map<std::string, double> overhead = one_rank_overhead(ddp_lines, "overlap_step_ms");
  int cases = 0, within[4] = {0, 0, 0, 0}, with_compute = 0, with_overhead = 0;
  for (const auto& j : ddp_lines) {
    const int n = j.at("ranks");
    auto fit = fits.find({n, link_of(j), bench::Collective::kAllReduce});
    if (n > 1 && fit == fits.end()) {
      fmt::print("{:>5} {:>9}   no all-reduce fit for this layout: skipped\n", n, link_of(j));
      continue;
    }
    const AlphaBeta link = n > 1 ? fit->second : AlphaBeta{0, 1};
    for (const auto& r : j.at("results")) {
      const std::string model = r.at("model");
      if (!alone.count(model)) continue;
      const bench::StepProfile& one = alone.at(model);
      const double measured = r.at("overlap_step_ms").get<double>() / 1e3;
      const double cpu =
          (r.at("after_backward_step_ms").get<double>() - r.at("after_backward_comm_ms").get<double>()) / 1e3;
      auto col = [&](int k, double predicted, int width) {
        return error_cell(predicted, measured, width, within[k]);
      };
      std::string at_n = fmt::format("{:>10} {:>6} | {:>10} {:>6} | {:>6} {:>6} {:>6}", "-", "", "-", "", "", "", "");
      if (r.contains("compute")) {
        const bench::StepProfile together = bench::step_profile_from_json(r.at("compute"));
        const double predicted = bench::predict_step(together, link, n).step_s;
        std::string plus = fmt::format("{:>10} {:>6}", "-", "");
        if (n > 1 && overhead.count(model)) {
          plus = col(3, predicted + overhead.at(model), 10);
          ++with_overhead;
        }
        at_n = col(1, predicted, 10) + " | " + plus + " |" +
               fmt::format(" {:>5.2f}x {:>6} {:>6}", total(together) / total(one),
                           together.cpu_s > 0 && one.cpu_s > 0 ? fmt::format("{:.2f}x", together.cpu_s / one.cpu_s) : "-",
                           on_cpu(together));
        ++with_compute;
      }
      ++cases;
      fmt::print("{:>5} {:>9} {:>9} {:>9.2f} | {} | {} | {}\n", n, link_of(j), model, measured * 1e3,
                 col(0, bench::predict_step(one, link, n, std::max(1.0, static_cast<double>(n) / cores)).step_s, 16),
                 at_n, col(2, bench::predict_step(one, link, n, cpu / total(one)).step_s, 10));
    }
  }
  fmt::print("within 15 %: {} of {} (1-rank profile stretched), {} of {} (compute at n ranks), {} of {} (+ overhead, "
             "n > 1), {} of {} (run's cpu)\n", within[0], cases, within[1], with_compute, within[3], with_overhead,
             within[2], cases);
}

/// Per ddp_bench line with ZeRO-1 steps and compute: the ZeRO step predicted from the compute at n
/// ranks with the reduce-scatter and all-gather fits of that layout, alone and plus ZeRO's
/// per-step cost without communication fitted on the 1-rank line (the parameter copies out of
/// the buckets), beside the measured ZeRO and DDP steps.
void validate_zero(const std::vector<nlohmann::json>& ddp_lines, const Fits& fits) {
  fmt::print("\nZeRO-1 step, ms: measured by ddp_bench vs predicted from the compute at n ranks (reduce-scatter "
             "overlapped with backward, 1/n of the optimizer, all-gather after), alone and \"+ overhead\" (fitted on "
             "the 1-rank line, for n > 1); the DDP step beside it\n");
  fmt::print("{:>5} {:>9} {:>9} {:>9} | {:>10} {:>6} | {:>10} {:>6} | {:>8}\n", "ranks", "link", "model", "measured",
             "at n ranks", "error", "+ overhead", "error", "DDP ms");
  const std::map<std::string, double> overhead = one_rank_overhead(ddp_lines, "zero_step_ms");
  int cases = 0, within = 0, with_overhead = 0, within_overhead = 0;
  for (const auto& j : ddp_lines) {
    const int n = j.at("ranks");
    auto rs = fits.find({n, link_of(j), bench::Collective::kReduceScatter});
    auto ag = fits.find({n, link_of(j), bench::Collective::kAllGather});
    if (n > 1 && (rs == fits.end() || ag == fits.end())) {
      fmt::print("{:>5} {:>9}   no reduce-scatter and all-gather fits for this layout: skipped\n", n, link_of(j));
      continue;
    }
    auto time_of = [&](Fits::const_iterator f, bench::Collective c) {
      return [=](double bytes) { return n > 1 ? bench::collective_seconds(c, f->second, n, bytes) : 0.0; };
    };
    for (const auto& r : j.at("results")) {
      if (!r.contains("zero_step_ms") || !r.contains("compute")) continue;
      const std::string model = r.at("model");
      const double measured = r.at("zero_step_ms").get<double>() / 1e3;
      const double predicted =
          bench::predict_zero_step_with(bench::step_profile_from_json(r.at("compute")),
                                        time_of(rs, bench::Collective::kReduceScatter),
                                        time_of(ag, bench::Collective::kAllGather), n)
              .step_s;
      std::string plus = fmt::format("{:>10} {:>6}", "-", "");
      if (n > 1 && overhead.count(model)) {
        plus = error_cell(predicted + overhead.at(model), measured, 10, within_overhead);
        ++with_overhead;
      }
      ++cases;
      fmt::print("{:>5} {:>9} {:>9} {:>9.2f} | {} | {} | {:>8.2f}\n", n, link_of(j), model, measured * 1e3,
                 error_cell(predicted, measured, 10, within), plus, r.at("overlap_step_ms").get<double>());
    }
  }
  fmt::print("within 15 %: {} of {} (compute at n ranks), {} of {} (+ overhead, n > 1)\n", within, cases,
             within_overhead, with_overhead);
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
  fmt::print("{:>32} {:>6} {:>10} {:>10} {:>11} {:>14} {:>8}\n", "gradients", "GPUs", "comm ms", "exposed ms",
             "efficiency", "hierarchical", "ZeRO-1");
  for (const Work& w : works)
    for (int n : {8, 16, 32, 64, 128, 256, 512}) {
      bench::StepProfile p;
      p.forward_s = w.step_s / 3 * 0.95;
      p.backward_s = w.step_s * 2 / 3;
      p.optimizer_s = w.step_s / 3 * 0.05;
      const double bytes = w.params * 4, cap = 25e6;
      const int k = static_cast<int>(std::ceil(bytes / cap));
      for (int b = 0; b < k; ++b) p.buckets.push_back({p.backward_s * (b + 1) / k, std::min(cap, bytes - b * cap)});
      const AlphaBeta& link = n <= 8 ? nvlink : infiniband;
      auto pred = bench::predict_step(p, link, n);
      auto zero = bench::predict_zero_step_with(
          p, [&](double b) { return bench::reduce_scatter_seconds(link, n, b); },
          [&](double b) { return bench::allgather_seconds(link, n, b); }, n);
      auto hier = bench::predict_step_with(
          p, [&](double b) { return bench::hierarchical_allreduce_seconds(nvlink, infiniband, 8, n, b); });
      fmt::print("{:>32} {:>6} {:>10.1f} {:>10.1f} {:>10.1f}% {:>13.1f}% {:>7.1f}%\n", w.name, n, pred.comm_s * 1e3,
                 pred.exposed_s * 1e3, pred.efficiency * 100, hier.efficiency * 100, zero.efficiency * 100);
    }
  fmt::print("hierarchical: reduce-scatter over NVLink, each GPU's 1/8 all-reduced across nodes on its own NIC, "
             "all-gather over NVLink (NCCL-style; Kiln's Gloo hierarchy uses one leader per node).\n");
  fmt::print("ZeRO-1: the buckets reduce-scattered during backward, 1/n of the optimizer, the parameters all-gathered "
             "after it (flat ring, as the efficiency column).\n");
  fmt::print("Published: Horovod 90% at 512 GPUs (Inception V3, ResNet-101; Pascal, 25 GbE RoCE); PyTorch DDP "
             "near-linear at 256 GPUs (Li et al., VLDB 2020).\n");
}


/// Past data parallel: GPT-2 1.5B and a 7B model on 8-1,024 H100s, DDP, FSDP and tensor parallel
/// within a node x FSDP across nodes (bench/scaling_math.h's predict_sharded_step), beside
/// Megatron-LM's published MFU.
void project_sharded() {
  // H100 SXM: 989 TFLOP/s dense bf16; the layers' kernels at 60 % of it (an assumption: the
  // model's MFU can be no better). NVLink 4 within 8-GPU nodes (NCCL all-reduce busbw ~360 GB/s),
  // one 400 Gb/s NIC per GPU between nodes (50 GB/s, ~90 % reachable).
  const bench::ClusterSpec h100{989e12, 0.6, 8, {5e-6, 360e9}, {10e-6, 45e9}};
  struct Model {
    const char* name;
    bench::TransformerShape shape;
  };
  // GPT-2 XL: 48 layers of 1600, 1,024 tokens; a Llama-2-7B-like model: 32 layers of 4096, 4,096 tokens.
  const Model models[] = {{"GPT-2 1.5B", {1.56e9, 48, 1600, 1024}}, {"7B", {6.7e9, 32, 4096, 4096}}};
  const double tokens_per_gpu = 8192, bytes = 2, hbm = 80e9;
  fmt::print("\nProjection past data parallel: H100 SXM (989 TFLOP/s bf16, kernels at 60 % of it), 8 per node on NVLink "
             "(α 5 us, B 360 GB/s), 400 Gb/s per GPU between nodes (α 10 us, B 45 GB/s); {:.0f} tokens per GPU per "
             "step (weak scaling, no accumulation), bf16 parameters and gradients on the wire, one unit per layer; "
             "state: 16 bytes per parameter held (2 + 2 + 12), activations not counted\n", tokens_per_gpu);
  fmt::print("{:>11} {:>6} {:>16} {:>10} {:>9} {:>9} {:>10} {:>9} {:>7} {:>10} {:>5}\n", "model", "GPUs", "layout",
             "compute ms", "TP ms", "DP ms", "exposed ms", "step ms", "MFU", "state GB", "fits");
  for (const Model& m : models)
    for (int n = 8; n <= 1024; n *= 2) {
      const std::pair<const char*, bench::ShardedLayout> layouts[] = {
          {"DDP", {1, n, false}}, {"FSDP", {1, n, true}}, {"TP 8 x FSDP", {8, n / 8, true}}};
      for (const auto& [name, l] : layouts) {
        const bench::ShardedStepPrediction p = bench::predict_sharded_step(m.shape, h100, l, tokens_per_gpu, bytes);
        fmt::print("{:>11} {:>6} {:>16} {:>10.1f} {:>9.1f} {:>9.1f} {:>10.1f} {:>9.1f} {:>6.1f}% {:>10.1f} {:>5}\n",
                   m.name, n, name, p.compute_s * 1e3, p.tp_s * 1e3, p.dp_comm_s * 1e3, p.exposed_s * 1e3,
                   p.step_s * 1e3, p.mfu * 100, p.state_bytes / 1e9, p.state_bytes < hbm ? "yes" : "no");
      }
    }
  fmt::print("DP ms: the data-parallel collectives (DDP: one all-reduce; FSDP: two all-gathers and a reduce-scatter per "
             "layer), over NVLink within one node, else a ring over the network; exposed: what compute does not hide "
             "(DDP: past 2/3 of compute plus the last layer's; FSDP: past all of it plus the first gather and the last "
             "reduce-scatter); TP: four all-reduces of the group's activations per layer, not hidden.\n");
  fmt::print("Published (Narayanan et al., SC 2021, Table 1; A100, 312 TFLOP/s bf16, 3D parallel with pipelining): "
             "1.7B on 32 GPUs 44 %, 7.5B (TP 4) on 128 GPUs 46 %, 76B on 1,024 GPUs 45 %, 1T on 3,072 GPUs 52 % of "
             "peak (502 PFLOP/s).\n");
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
  app.add_option("--cores", cores, "cores the measured ranks shared (for the stretched 1-rank column)")
      ->check(cli::range(1, 4096));
  app.add_option("--steps", steps, "profiled steps per model when no 1-rank ddp_bench line gives them (median)")
      ->check(cli::range(1, 10000));
  app.add_flag("--projection-only", no_profile, "print only the projections (8-512 GPUs DDP, 8-1,024 H100s sharded)");
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  try {
    if (!no_profile) {
      auto fits = fit_all(read_lines(allreduce_path));
      const auto ddp = read_lines(ddp_path);
      validate(ddp, fits, one_rank_profiles(ddp, steps), cores);
      validate_zero(ddp, fits);
    }
    project();
    project_sharded();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
