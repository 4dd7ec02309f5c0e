// The CPU's f32 FMA ceiling: GFLOP/s of a loop of independent fused multiply-adds kept in
// registers (no loads, no stores), on 1 to --threads threads, at the widest vectors the CPU runs
// (AVX-512 where it has it, else AVX2). No GEMM can pass this figure; docs/benchmarks.md quotes
// Kiln's GEMM and its end-to-end MFU beside it. Each figure is the best of --repeats runs. The
// last line is JSON.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/host_check.h"
#include "bench/timing.h"
#include "core/util/cli.h"

namespace {

// Twelve accumulators: enough independent chains to cover the FMA latency (4 cycles) on two
// pipes. Each starts from its own value, so the compiler cannot merge them.
constexpr int kChains = 12;

// One loop body for both widths (each function needs its own target attribute, which neither a
// template nor a lambda inside it would inherit): kChains chains of a = a * b + d, written out so
// that they stay in registers at any optimisation level.
#define KILN_FMA_LOOP(V, SET, FMA)                                                                  \
  V a0 = SET(1.000f), a1 = SET(1.001f), a2 = SET(1.002f), a3 = SET(1.003f), a4 = SET(1.004f),       \
    a5 = SET(1.005f), a6 = SET(1.006f), a7 = SET(1.007f), a8 = SET(1.008f), a9 = SET(1.009f),       \
    a10 = SET(1.010f), a11 = SET(1.011f);                                                           \
  const V b = SET(0.999999f), d = SET(1e-7f);                                                       \
  for (int64_t i = 0; i < iters; ++i) {                                                             \
    a0 = FMA(a0, b, d), a1 = FMA(a1, b, d), a2 = FMA(a2, b, d), a3 = FMA(a3, b, d);                 \
    a4 = FMA(a4, b, d), a5 = FMA(a5, b, d), a6 = FMA(a6, b, d), a7 = FMA(a7, b, d);                 \
    a8 = FMA(a8, b, d), a9 = FMA(a9, b, d), a10 = FMA(a10, b, d), a11 = FMA(a11, b, d);             \
  }                                                                                                 \
  *sink = a0[0] + a1[0] + a2[0] + a3[0] + a4[0] + a5[0] + a6[0] + a7[0] + a8[0] + a9[0] + a10[0] + \
          a11[0];

__attribute__((target("avx512f"))) void fma_avx512(int64_t iters, float* sink) {
  KILN_FMA_LOOP(__m512, _mm512_set1_ps, _mm512_fmadd_ps)
}

__attribute__((target("avx2,fma"))) void fma_avx2(int64_t iters, float* sink) {
  KILN_FMA_LOOP(__m256, _mm256_set1_ps, _mm256_fmadd_ps)
}

#undef KILN_FMA_LOOP

/// GFLOP/s of `threads` threads running the loop at once (wall time until the last one ends).
double run(int threads, bool avx512, int64_t iters) {
  std::vector<float> sink(threads);
  std::vector<std::thread> pool;
  const double t0 = kiln::bench::now_s();
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] { (avx512 ? fma_avx512 : fma_avx2)(iters, &sink[t]); });
  for (auto& th : pool) th.join();
  const double dt = kiln::bench::now_s() - t0;
  const double flop = threads * 2.0 * (avx512 ? 16 : 8) * kChains * static_cast<double>(iters);
  return flop / dt * 1e-9;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln;
  cli::App app("The CPU's f32 FMA peak (registers only): the ceiling for any GEMM's GFLOP/s.", "fma_peak");
  bool allow_load = false;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int repeats = 5;
  std::string isa = "best";
  app.add_flag("--allow-load", allow_load, bench::kAllowLoadHelp);
  app.add_option("--threads", threads, "largest thread count (default: the CPUs)")->check(cli::range(1, 1024));
  app.add_option("--repeats", repeats, "runs per thread count; the best is reported")->check(cli::range(1, 100));
  app.add_option("--isa", isa, "best (AVX-512 where the CPU has it), avx512 or avx2")
      ->check(cli::one_of({"best", "avx512", "avx2"}));
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  __builtin_cpu_init();
  const bool has512 = __builtin_cpu_supports("avx512f"), has2 = __builtin_cpu_supports("avx2") &&
                                                                __builtin_cpu_supports("fma");
  if (!has2 || (isa == "avx512" && !has512)) {
    fmt::print(stderr, "fma_peak: this CPU has no {}\n", isa == "avx512" ? "AVX-512F" : "AVX2 with FMA");
    return 2;
  }
  const bool avx512 = isa == "avx512" || (isa == "best" && has512);
  bench::HostCheck host("fma_peak", allow_load);
  if (!host.may_report()) return bench::kLoadedExitCode;
  const int64_t iters = 20'000'000;  // about 0.1-0.3 s per run
  nlohmann::ordered_json json, per_threads = nlohmann::ordered_json::object();
  json["isa"] = avx512 ? "avx512" : "avx2";
  fmt::print("f32 FMA peak, {} ({}-float vectors, {} accumulators), best of {}\n", avx512 ? "AVX-512" : "AVX2",
             avx512 ? 16 : 8, kChains, repeats);
  for (int t = 1; t <= threads; ++t) {
    double best = 0;
    for (int r = 0; r < repeats; ++r) best = std::max(best, run(t, avx512, iters));
    fmt::print("{:>3} threads: {:8.1f} GFLOP/s ({:.1f} per thread)\n", t, best, best / t);
    per_threads[std::to_string(t)] = best;
  }
  json["gflops_by_threads"] = per_threads;
  host.finish(json);
  fmt::print("{}\n", json.dump());
  return 0;
}
