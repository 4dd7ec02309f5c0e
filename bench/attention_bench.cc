// Scaled-dot-product attention, fused (the flash-style primitive) against the composite of core
// ops (matmul, softmax, matmul, storing the [T, T] probabilities): forward + backward time, the
// peak memory of one step above the inputs (CPU: CpuMemoryTracker; CUDA: the caching
// allocator's peak) and, on the CPU, the fused step's GFLOP/s beside Kiln's measured GEMM rate;
// causal, at B=4, H=12, D=64 and each --seqs length. Time is the best of --reps runs after a
// warm-up (shared machines add noise only upwards). Prints a table and one JSON line.
//   attention_bench [--seqs 256,1024] [--reps 5] [--threads N] [--device cpu|cuda] [--dtype f32|bf16|f16]
//                   [--allow-load]
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/host_check.h"
#include "bench/timing.h"
#include "core/grad_mode.h"
#include "core/memory/memory_tracker.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/util/cli.h"
#include "nn/attention.h"
#include "profiler/gemm_rate.h"
#ifdef KILN_HAVE_CUDA
#include "cuda/allocator.h"
#include "cuda/device.h"
#endif

using namespace kiln;
using kiln::bench::now_s;
namespace F = kiln::nn::functional;

namespace {

struct Result {
  double fwd_s = 1e30, step_s = 1e30;
  size_t peak_bytes = 0;
};

using Attention = Tensor (*)(const Tensor&, const Tensor&, const Tensor&, const F::AttentionOptions&);

/// Peak bytes of `step` above what was allocated before it, on `d`.
size_t step_peak(Device d, const std::function<void()>& step) {
#ifdef KILN_HAVE_CUDA
  if (d.is_cuda()) {
    synchronize(d);
    const size_t before = cuda::memory_stats(d.index).allocated;
    cuda::reset_peak_memory_stats(d.index);
    step();
    synchronize(d);
    return cuda::memory_stats(d.index).peak_allocated - before;
  }
#endif
  CpuMemoryTracker tracker;
  step();
  return tracker.peak_bytes();
}

Result measure(Attention attn, Device dev, DType dt, int64_t B, int64_t H, int64_t T, int64_t D, int reps) {
  auto make = [&] { return randn({B, H, T, D}).to(dev, dt).requires_grad_(); };
  Tensor q = make(), k = make(), v = make();
  Tensor g = randn({B, H, T, D}).to(dev, dt);
  auto step = [&] {
    Tensor out = attn(q, k, v, {.causal = true});
    out.backward(g);
    for (Tensor t : {q, k, v}) t.set_grad(Tensor());
    synchronize(dev);
  };
  Result r;
  step();  // warm-up (and the allocator's cache)
  r.peak_bytes = step_peak(dev, step);
  for (int i = 0; i < reps; ++i) {
    double t0 = now_s();
    {
      NoGradGuard ng;
      attn(q, k, v, {.causal = true});
      synchronize(dev);
    }
    r.fwd_s = std::min(r.fwd_s, now_s() - t0);
    t0 = now_s();
    step();
    r.step_s = std::min(r.step_s, now_s() - t0);
  }
  return r;
}

/// FLOPs of causal attention's forward + backward: seven [T, T] x D products (two forward, five
/// backward: the scores again, dP, dV, dK, dQ), each half of 2 T^2 D under the mask.
double causal_step_flops(int64_t B, int64_t H, int64_t T, int64_t D) { return 7.0 * B * H * T * T * D; }

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> seqs = {256, 1024};
  int reps = 5, threads = 0;
  std::string device = "cpu", dtype = "f32";
  bool allow_load = false;
  cli::App app("Fused scaled-dot-product attention against the composite of core ops: time, memory, GFLOP/s.",
               "attention_bench");
  app.add_option("--seqs", seqs, "comma-separated sequence lengths")
      ->delimiter(',')
      ->check(cli::range<int64_t>(1, 1 << 20));
  app.add_option("--reps", reps, "timed runs per figure (the best is reported)")->check(cli::range(1, 1000));
  app.add_option("--threads", threads, "CPU threads (0: Kiln's default)")->check(cli::range(0, 1024));
  app.add_option("--device", device, "cpu, cuda or cuda:N");
  app.add_option("--dtype", dtype, "element type")->check(cli::one_of({"f32", "bf16", "f16"}));
  app.add_flag("--allow-load", allow_load, bench::kAllowLoadHelp);
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (threads > 0) set_num_threads(threads);
  const DType dt = dtype == "bf16" ? kBFloat16 : dtype == "f16" ? kFloat16 : kFloat32;
  const Device dev(device);
#ifdef KILN_HAVE_CUDA
  if (dev.is_cuda() && cuda::device_count() == 0) {
    std::fprintf(stderr, "attention_bench: no CUDA device\n");
    return 1;
  }
#else
  if (dev.is_cuda()) {
    std::fprintf(stderr, "attention_bench: built without CUDA\n");
    return 1;
  }
#endif
  bench::HostCheck host("attention_bench", allow_load);
  if (!host.may_report()) return bench::kLoadedExitCode;
  const int64_t B = 4, H = 12, D = 64;
  manual_seed(0);
  nlohmann::json rows = nlohmann::json::array();
  fmt::print("attention on {}, {}, causal, B={} H={} D={}, {} threads; best of {}\n", device, dtype, B, H, D,
             get_num_threads(), reps);
  // On the CPU the fused step's rate is set beside the machine's GEMM rate (the target: 60 %).
  const double peak = dev.is_cuda() ? 0.0 : profiler::measured_cpu_gemm_flops() / 1e9;
  if (peak > 0) fmt::print("GEMM peak (Kiln's matmul, 1024^3, f32): {:.1f} GFLOP/s\n", peak);
  fmt::print("{:>6} {:>10} {:>12} {:>12} {:>12} {:>12}\n", "T", "impl", "fwd ms", "fwd+bwd ms", "peak MiB", "");
  for (int64_t T : seqs) {
    const Result fused = measure(&F::scaled_dot_product_attention, dev, dt, B, H, T, D, reps);
    const Result comp = measure(&F::scaled_dot_product_attention_composite, dev, dt, B, H, T, D, reps);
    for (auto [name, r] : {std::pair{"fused", fused}, std::pair{"composite", comp}})
      fmt::print("{:>6} {:>10} {:>12.2f} {:>12.2f} {:>12.1f}\n", T, name, r.fwd_s * 1e3, r.step_s * 1e3,
                 r.peak_bytes / 1048576.0);
    fmt::print("{:>6} {:>10} {:>11.2f}x {:>11.2f}x {:>11.2f}x  (composite / fused)\n", T, "ratio",
               comp.fwd_s / fused.fwd_s, comp.step_s / fused.step_s,
               static_cast<double>(comp.peak_bytes) / std::max<size_t>(fused.peak_bytes, 1));
    const double gflops = causal_step_flops(B, H, T, D) / fused.step_s / 1e9;
    if (peak > 0)
      fmt::print("{:>6} {:>10} fwd+bwd {:.1f} GFLOP/s on the causal FLOPs = {:.0f} % of the GEMM peak\n", T, "fused",
                 gflops, 100 * gflops / peak);
    rows.push_back({{"T", T},
                    {"fused_step_gflops", gflops},
                    {"fused_fwd_ms", fused.fwd_s * 1e3},
                    {"fused_step_ms", fused.step_s * 1e3},
                    {"fused_peak_mib", fused.peak_bytes / 1048576.0},
                    {"composite_fwd_ms", comp.fwd_s * 1e3},
                    {"composite_step_ms", comp.step_s * 1e3},
                    {"composite_peak_mib", comp.peak_bytes / 1048576.0}});
  }
  nlohmann::json out = {{"bench", "attention"}, {"device", device}, {"dtype", dtype}, {"B", B}, {"H", H}, {"D", D},
                        {"causal", true}, {"gemm_peak_gflops", peak},
                        {"threads", get_num_threads()}, {"rows", rows}};
  host.finish(out);
  fmt::print("{}\n", out.dump());
  return 0;
}
