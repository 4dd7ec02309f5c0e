// CPU conv2d throughput on the two convolutions of the Fashion-MNIST CNN at batch 128
// (1x28x28 -> 32 and 32x14x14 -> 64, 3x3, padding 1), f32: forward, backward (grad_w and
// grad_bias, plus grad_x for the second layer, as in training) and both, in GFLOP/s; and the
// 2x2 max pooling that follows each. Each figure is the best of several runs after a warm-up
// (the best, not the median, because shared machines add noise only upwards). The last line
// is JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/host_check.h"
#include "core/util/cli.h"
#include "core/conv.h"
#include "core/kernels.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "bench/timing.h"

using namespace kiln;
using kiln::bench::now_s;

namespace {

/// Best seconds of `f` over enough runs to fill about `budget_s` (at least 5), after warm-up.
double time_best(const std::function<void()>& f, double budget_s = 1.0) {
  f();
  double t0 = now_s();
  f();
  const double once = std::max(now_s() - t0, 1e-7);
  const int reps = static_cast<int>(std::clamp(budget_s / once, 5.0, 500.0));
  double best = once;
  for (int r = 0; r < reps; ++r) {
    t0 = now_s();
    f();
    best = std::min(best, now_s() - t0);
  }
  return best;
}

using Json = nlohmann::ordered_json;

struct Layer {
  const char* name;
  int64_t N, C, H, Cout;
  bool grad_x;  // the first layer's input is data: no gradient for it in training
};

}  // namespace

int main(int argc, char** argv) {
  cli::App app("conv2d forward/backward GFLOP/s on the Fashion-MNIST CNN's convolutions, and max pooling.",
               "conv_bench");
  bool allow_load = false;
  app.add_flag("--allow-load", allow_load, bench::kAllowLoadHelp);
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  bench::HostCheck host("conv_bench", allow_load);
  if (!host.may_report()) return bench::kLoadedExitCode;
  manual_seed(0);
  Json json;
  json["threads"] = get_num_threads();
  fmt::print("conv2d f32, batch 128, 3x3, padding 1, {} threads (GFLOP/s, ms)\n", get_num_threads());
  fmt::print("{:>22} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "layer", "fwd", "bwd", "fwd+bwd", "fwd ms", "bwd ms");
  const std::vector<Layer> layers = {{"conv1", 128, 1, 28, 32, false}, {"conv2", 128, 32, 14, 64, true}};
  double total_flop = 0, total_s = 0;
  for (const Layer& l : layers) {
    Tensor x = randn({l.N, l.C, l.H, l.H}), w = randn({l.Cout, l.C, 3, 3}) * 0.1, b = randn({l.Cout});
    const Conv2dParams p = make_conv2d_params({1}, {1}, {1}, 1);
    Tensor y = conv2d(x, w, b, {1}, {1});
    Tensor go = randn(y.sizes());
    Tensor gx = l.grad_x ? empty(x.sizes()) : Tensor(), gw = empty(w.sizes()), gb = empty({l.Cout});
    const double fwd_flop = 2.0 * l.N * l.Cout * l.H * l.H * l.C * 9;
    const double bwd_flop = fwd_flop * (l.grad_x ? 2 : 1);
    const double t_fwd = time_best([&] { y = conv2d(x, w, b, {1}, {1}); });
    const double t_bwd = time_best([&] { kernels::conv2d_backward[kCPU](gx, gw, gb, go, x, w, p); });
    const double g_fwd = fwd_flop / t_fwd * 1e-9, g_bwd = bwd_flop / t_bwd * 1e-9;
    const double g_all = (fwd_flop + bwd_flop) / (t_fwd + t_bwd) * 1e-9;
    total_flop += fwd_flop + bwd_flop;
    total_s += t_fwd + t_bwd;
    const std::string desc = fmt::format("{} {}x{}x{}->{}", l.name, l.C, l.H, l.H, l.Cout);
    fmt::print("{:>22} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.3f} {:>9.3f}\n", desc, g_fwd, g_bwd, g_all, t_fwd * 1e3,
               t_bwd * 1e3);
    json[fmt::format("{}_fwd_gflops", l.name)] = g_fwd;
    json[fmt::format("{}_bwd_gflops", l.name)] = g_bwd;
    json[fmt::format("{}_fwd_bwd_gflops", l.name)] = g_all;
    json[fmt::format("{}_fwd_ms", l.name)] = t_fwd * 1e3;
    json[fmt::format("{}_bwd_ms", l.name)] = t_bwd * 1e3;
  }
  fmt::print("{:>22} {:>39.1f} {:>9.3f} ms in all\n", "both layers", total_flop / total_s * 1e-9, total_s * 1e3);
  json["conv_fwd_bwd_gflops"] = total_flop / total_s * 1e-9;

  fmt::print("\nmax_pool2d 2x2 f32 (ms)\n{:>22} {:>9} {:>9}\n", "input", "fwd", "bwd");
  for (const Layer& l : layers) {
    Tensor a = randn({l.N, l.Cout, l.H, l.H});
    const Pool2dParams p = make_pool2d_params({2}, {2}, {0}, false, true, "max_pool2d");
    auto [out, idx] = max_pool2d_with_indices(a, p);
    Tensor go = randn(out.sizes()), ga = empty(a.sizes());
    const double t_fwd = time_best([&] { out = max_pool2d(a, {2}); }, 0.5);
    const double t_bwd = time_best([&] { kernels::max_pool2d_backward[kCPU](ga, go, idx); }, 0.5);
    fmt::print("{:>22} {:>9.3f} {:>9.3f}\n", fmt::format("{}x{}x{}x{}", l.N, l.Cout, l.H, l.H), t_fwd * 1e3,
               t_bwd * 1e3);
    json[fmt::format("maxpool_after_{}_fwd_ms", l.name)] = t_fwd * 1e3;
    json[fmt::format("maxpool_after_{}_bwd_ms", l.name)] = t_bwd * 1e3;
  }
  host.finish(json);
  fmt::print("{}\n", json.dump());
  return 0;
}
