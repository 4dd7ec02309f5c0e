// Core CPU throughput: f32 matmul GFLOP/s for square and skinny shapes next to raw Eigen GEMM on
// the same buffers in the same run (Kiln should be within ~10%), and effective GB/s of
// memory-bound ops on 16M-element tensors (elementwise, reductions, softmax, layer norm, gelu,
// transposing copy, cross-entropy, the AdamW step), each also as a percentage of a plain copy's.
// `matmul` is the public op (it allocates its result, as users call it); `kernel` is the CPU
// bmm kernel writing into a preallocated output, like the raw Eigen call it is compared with.
// Each figure is the median of several timed runs after a warm-up. The last line is JSON.
#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/util/cli.h"
#include "core/kernels.h"
#include "core/ops.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/layer_norm.h"
#include "core/parallel.h"
#include "bench/host_check.h"
#include "bench/timing.h"

using namespace kiln;
using kiln::bench::median;
using kiln::bench::now_s;

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

/// Median seconds of each of `fs`, timed in interleaved rounds so that a busy machine slows all
/// of them alike (the ratios stay meaningful).
std::vector<double> time_interleaved(const std::vector<std::function<void()>>& fs, double budget_s) {
  double once = 0;
  for (const auto& f : fs) {
    f();
    const double t0 = now_s();
    f();
    once += std::max(now_s() - t0, 1e-7);
  }
  const int rounds = static_cast<int>(std::clamp(budget_s / once, 7.0, 200.0));
  std::vector<std::vector<double>> ts(fs.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < fs.size(); ++i) {
      const double t0 = now_s();
      fs[i]();
      ts[i].push_back(now_s() - t0);
    }
  std::vector<double> out;
  for (auto& t : ts) out.push_back(median(t));
  return out;
}

using Json = nlohmann::ordered_json;

/// GFLOP/s of Eigen's own multi-threaded GEMM per "MxKxN", from the reference binary (empty if
/// it is not given or fails).
std::map<std::string, double> eigen_threaded_reference(const char* binary, const std::vector<std::array<int64_t, 3>>& shapes) {
  std::map<std::string, double> out;
  if (binary == nullptr) return out;
  std::string cmd = fmt::format("'{}' {}", binary, get_num_threads());
  for (const auto& s : shapes) cmd += fmt::format(" {} {} {}", s[0], s[1], s[2]);
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  std::string text;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), p)) text.append(buf, n);
  pclose(p);
  // {"256x256x256": 123.4, ...}; anything else (a failed run) leaves the reference out.
  try {
    out = nlohmann::json::parse(text).get<std::map<std::string, double>>();
  } catch (const nlohmann::json::exception& e) {
    fmt::print(stderr, "core_bench: the Eigen reference printed no usable JSON ({}): {}\n", e.what(), text);
  }
  return out;
}

void bench_matmul(Json& json, const char* reference) {
  struct Shape3 { int64_t m, k, n; };
  const std::vector<Shape3> shapes = {{256, 256, 256},   {512, 512, 512},   {1024, 1024, 1024},
                                      {2048, 2048, 2048}, {128, 784, 256},   {4096, 256, 256},
                                      {2048, 2048, 64},   {128, 256, 10}};
  std::vector<std::array<int64_t, 3>> dims;
  for (const Shape3& s : shapes) dims.push_back({s.m, s.k, s.n});
  const std::map<std::string, double> eigen_mt = eigen_threaded_reference(reference, dims);
  fmt::print("matmul f32 (GFLOP/s); eigen: serial Eigen GEMM in this process; eigen-mt: Eigen's own\n"
             "OpenMP GEMM with the same thread count (bench/eigen_gemm_reference); mt-ratio = matmul / eigen-mt\n");
  fmt::print("{:>22} {:>10} {:>10} {:>10} {:>7} {:>7} {:>9} {:>8}\n", "M x K @ K x N", "matmul", "kernel", "eigen",
             "ratio", "k-ratio", "eigen-mt", "mt-ratio");
  for (const Shape3& s : shapes) {
    Tensor a = randn({s.m, s.k}), b = randn({s.k, s.n});
    Eigen::Map<const RowMat> A(a.data_ptr<float>(), s.m, s.k), B(b.data_ptr<float>(), s.k, s.n);
    RowMat C(s.m, s.n);
    Tensor keep, out = empty({1, s.m, s.n});
    const Tensor a3 = a.unsqueeze(0), b3 = b.unsqueeze(0);
    const double flop = 2.0 * s.m * s.n * s.k;
    const std::vector<double> t = time_interleaved({[&] { keep = matmul(a, b); },
                                                    [&] { kernels::bmm[kCPU](out, a3, b3); },
                                                    [&] { C.noalias() = A * B; }},
                                                   1.5);
    const double t_kiln = t[0], t_kernel = t[1], t_eigen = t[2];
    const double g_kiln = flop / t_kiln * 1e-9, g_kernel = flop / t_kernel * 1e-9, g_eigen = flop / t_eigen * 1e-9;
    const std::string name = fmt::format("{}x{}@{}x{}", s.m, s.k, s.k, s.n);
    auto mt = eigen_mt.find(fmt::format("{}x{}x{}", s.m, s.k, s.n));
    const double g_mt = mt == eigen_mt.end() ? 0.0 : mt->second;
    fmt::print("{:>22} {:>10.1f} {:>10.1f} {:>10.1f} {:>7.3f} {:>7.3f} {:>9.1f} {:>8.3f}\n", name, g_kiln, g_kernel,
               g_eigen, g_kiln / g_eigen, g_kernel / g_eigen, g_mt, g_mt > 0 ? g_kiln / g_mt : 0.0);
    const std::string key = fmt::format("matmul_{}x{}x{}", s.m, s.k, s.n);
    if (g_mt > 0) {
      json[key + "_eigen_threaded_gflops"] = g_mt;
      json[key + "_threaded_ratio"] = g_kiln / g_mt;
    }
    json[key + "_gflops"] = g_kiln;
    json[key + "_kernel_gflops"] = g_kernel;
    json[key + "_eigen_gflops"] = g_eigen;
    json[key + "_ratio"] = g_kiln / g_eigen;
    json[key + "_kernel_ratio"] = g_kernel / g_eigen;
  }
}

void bench_memory(Json& json) {
  const int64_t n = int64_t{1} << 24;  // 16M floats = 64 MiB per tensor
  const double mb = static_cast<double>(n) * sizeof(float);
  Tensor x = randn({n}), y = randn({n});
  Tensor rows = x.view({16384, 1024});
  Tensor grad_rows = y.view({16384, 1024});
  Tensor square = x.view({4096, 4096});
  Tensor keep;
  // Preallocated operands of the cases that call a kernel directly (backward passes and the
  // optimizer step have no allocating public op without autograd).
  Tensor out_rows = empty({16384, 1024});
  Tensor ln_weight = randn({1024}), ln_bias = randn({1024});
  Tensor ln_mean, ln_rstd;
  std::tie(std::ignore, ln_mean, ln_rstd) = layer_norm_with_stats(rows, ln_weight, ln_bias, 1, 1e-5);
  Tensor ln_grad_w = empty({1024}), ln_grad_b = empty({1024});
  Tensor targets = randint(0, 1024, {16384});
  Tensor ce_grad_loss = full({16384}, 1.0 / 16384);
  std::vector<Tensor> adam_p = {randn({n})}, adam_g = {randn({n})}, adam_m = {zeros({n})}, adam_v = {zeros({n})},
                      adam_vmax;
  AdamStepParams adamw{.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
  adamw.decoupled = true;
  adamw.step_size = 1e-3 / (1 - 0.9);
  adamw.bias_corr2_sqrt = std::sqrt(1 - 0.999);
  struct Case {
    const char* name;
    double bytes;  // bytes each must read + write once
    std::function<void()> run;
  };
  // `copy` (a contiguous clone) comes first: every case's "% of copy" is its GB/s over copy's.
  const std::vector<Case> cases = {
      {"copy", 2 * mb, [&] { keep = x.clone(); }},
      {"add", 3 * mb, [&] { keep = x + y; }},
      {"mul_scalar", 2 * mb, [&] { keep = x * 2.0; }},
      {"exp", 2 * mb, [&] { keep = exp(x); }},
      {"relu", 2 * mb, [&] { keep = relu(x); }},
      {"sum", mb, [&] { keep = sum(x); }},
      {"sum_rows", mb, [&] { keep = sum(rows, {1}); }},
      {"sum_cols", mb, [&] { keep = sum(rows, {0}); }},
      {"amax", mb, [&] { keep = amax(x); }},
      {"softmax_rows", 2 * mb, [&] { keep = softmax(rows, 1); }},
      {"log_softmax_rows", 2 * mb, [&] { keep = log_softmax(rows, 1); }},
      // x, w, b in; y, mean, rstd out (w, b, mean, rstd are a row or a column: not counted).
      {"layer_norm_rows", 2 * mb, [&] { keep = std::get<0>(layer_norm_with_stats(rows, ln_weight, ln_bias, 1, 1e-5)); }},
      // grad_out and x in, grad_x out (grad_weight, grad_bias: one row each).
      {"layer_norm_backward", 3 * mb,
       [&] {
         kernels::layer_norm_backward[kCPU](out_rows, ln_grad_w, ln_grad_b, grad_rows, rows, ln_mean, ln_rstd,
                                            ln_weight);
       }},
      {"gelu_tanh", 2 * mb, [&] { keep = gelu(x, "tanh"); }},
      {"gelu_tanh_backward", 3 * mb,
       [&] { kernels::unary_backward[kCPU](UnaryOp{UnaryKind::gelu_tanh}, out_rows, grad_rows, rows); }},
      {"transpose_contiguous", 2 * mb, [&] { keep = square.t().contiguous(); }},
      // Forward reads the logits; backward reads them again and writes their gradient.
      {"cross_entropy_fwd_bwd", 3 * mb,
       [&] {
         const Tensor lse = std::get<1>(cross_entropy_with_lse(rows, targets, -100, 0.0));
         kernels::cross_entropy_backward[kCPU](out_rows, ce_grad_loss, rows, lse, targets, -100, 0.0);
       }},
      // p, g, m, v in; p, m, v out.
      {"adamw_step", 7 * mb,
       [&] { kernels::adam_step[kCPU](adam_p, adam_g, adam_m, adam_v, adam_vmax, adamw); }},
  };
  fmt::print("\nmemory-bound ops on 16M f32 ({} MiB per tensor); GB/s = bytes each op must read + write once\n"
             "over its time; % of copy = its GB/s over copy's (x.clone()) in this run\n",
             n * 4 >> 20);
  fmt::print("{:>22} {:>10} {:>10} {:>10}\n", "op", "ms", "GB/s", "% of copy");
  double copy_gbps = 0;
  for (const Case& c : cases) {
    double t;
    try {
      t = bench::time_median(c.run, 0.5);
    } catch (const std::exception& e) {
      fmt::print("{:>22} unavailable: {}\n", c.name, e.what());
      continue;
    }
    const double gbps = c.bytes / t * 1e-9;
    if (copy_gbps == 0) copy_gbps = gbps;
    const double pct = 100 * gbps / copy_gbps;
    fmt::print("{:>22} {:>10.2f} {:>10.1f} {:>10.0f}\n", c.name, t * 1e3, gbps, pct);
    json[std::string(c.name) + "_gbps"] = gbps;
    json[std::string(c.name) + "_pct_of_copy"] = pct;
  }
}

}  // namespace

int main(int argc, char** argv) {
  fmt::print("kiln core_bench: {} threads, Eigen {}.{}.{}\n\n", get_num_threads(), EIGEN_WORLD_VERSION,
             EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION);
  std::string reference;
  cli::App app("Kiln's core ops against Eigen: GEMM GFLOP/s and memory-bound GB/s.", "core_bench");
  app.add_option("eigen_reference", reference,
                 "the bench/eigen_gemm_reference binary (bench/BUILD passes it; optional when run by hand)")
      ->check(CLI::ExistingFile);
  bool allow_load = false;
  app.add_flag("--allow-load", allow_load, bench::kAllowLoadHelp);
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  bench::HostCheck host("core_bench", allow_load);
  if (!host.may_report()) return bench::kLoadedExitCode;
  Json json = {{"bench", "core_bench"}};
  json["threads"] = get_num_threads();
  bench_matmul(json, reference.empty() ? nullptr : reference.c_str());
  bench_memory(json);
  host.finish(json);
  fmt::print("{}\n", json.dump());
  return 0;
}
