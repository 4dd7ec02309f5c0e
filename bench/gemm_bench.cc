// CUDA GEMM throughput: Kiln's matmul (cuBLAS) and linear (cuBLASLt, bias in the epilogue) in
// TFLOP/s for f32, TF32 (set_float32_matmul_precision("high")), bf16 and f16 over square sizes
// and a linear-layer shape. Median of blocks timed with CUDA events. Prints a table and one JSON
// line; bench/gemm_vs_pytorch.py runs torch.matmul on the same problems beside it. Without a
// CUDA device it says so and exits 0.
//   gemm_bench [--sizes 1024,2048,4096,8192]
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "bench/host_check.h"
#include "bench/timing.h"
#include "core/util/cli.h"
#include "core/matmul_precision.h"
#include "core/op_table.h"
#include "core/ops.h"
#include "cuda/device.h"
#include "cuda/stream.h"

using namespace kiln;

namespace {

/// Median milliseconds per call over 5 blocks of `iters` calls, after a warm-up.
double time_ms(const std::function<void()>& f, int iters) {
  f();
  cuda::synchronize();
  std::vector<double> blocks;
  for (int b = 0; b < 5; ++b) {
    cuda::Event start(true), end(true);
    start.record(cuda::current_stream(0));
    for (int i = 0; i < iters; ++i) f();
    end.record(cuda::current_stream(0));
    end.synchronize();
    blocks.push_back(start.elapsed_ms(end) / iters);
  }
  return bench::median(blocks);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {1024, 2048, 4096, 8192};
  cli::App app("CUDA GEMM TFLOP/s of Kiln's matmul and linear in f32, TF32, bf16 and f16.", "gemm_bench");
  app.add_option("--sizes", sizes, "comma-separated square sizes")
      ->delimiter(',')
      ->check(cli::range<int64_t>(1, 65536));
  bool allow_load = false;
  app.add_flag("--allow-load", allow_load, bench::kAllowLoadHelp);
  if (int rc = cli::parse(app, argc, argv); rc >= 0) return rc;
  if (cuda::device_count() == 0) {
    std::printf("skipped: no CUDA device\n{\"bench\": \"gemm_bench\", \"skipped\": \"no CUDA device\"}\n");
    return 0;
  }
  bench::HostCheck host("gemm_bench", allow_load);
  if (!host.may_report()) return bench::kLoadedExitCode;
  std::printf("device: %s\n", cuda::device_description(0).c_str());
  const Device gpu("cuda:0");
  struct Mode {
    const char* name;
    DType dtype;
    bool tf32;
  };
  const Mode modes[] = {{"f32", kFloat32, false}, {"tf32", kFloat32, true}, {"bf16", kBFloat16, false},
                        {"f16", kFloat16, false}};
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  std::printf("%-6s %-22s %10s %10s\n", "mode", "problem (M x K x N)", "ms", "TFLOP/s");
  auto report = [&](const Mode& m, const std::string& op, int64_t M, int64_t K, int64_t N, double ms) {
    const double tflops = 2.0 * M * K * N / ms / 1e9;
    std::printf("%-6s %-22s %10.3f %10.1f\n", m.name, fmt::format("{} {}x{}x{}", op, M, K, N).c_str(), ms, tflops);
    results.push_back({{"mode", m.name}, {"op", op}, {"M", M}, {"K", K}, {"N", N}, {"ms", ms}, {"tflops", tflops}});
  };
  for (const Mode& m : modes) {
    set_float32_matmul_precision(m.tf32 ? Float32MatmulPrecision::high : Float32MatmulPrecision::highest);
    for (int64_t n : sizes) {
      Tensor a = randn({n, n}).to(m.dtype).to(gpu), b = randn({n, n}).to(m.dtype).to(gpu);
      const int iters = n >= 8192 ? 5 : n >= 4096 ? 20 : 50;
      report(m, "matmul", n, n, n, time_ms([&] { Tensor c = matmul(a, b); }, iters));
    }
    // A training-shaped linear layer: batch 8192 tokens, 4096 -> 4096 with bias.
    const int64_t M = 8192, K = 4096, N = 4096;
    Tensor x = randn({M, K}).to(m.dtype).to(gpu), w = randn({N, K}).to(m.dtype).to(gpu),
           bias = randn({N}).to(m.dtype).to(gpu);
    report(m, "linear+bias", M, K, N, time_ms([&] { Tensor y = op::linear(x, w, bias); }, 20));
  }
  set_float32_matmul_precision(Float32MatmulPrecision::highest);
  nlohmann::ordered_json line = {{"bench", "gemm_bench"}, {"results", results}};
  host.finish(line);
  std::printf("%s\n", line.dump().c_str());
}
