#include "profiler/gemm_rate.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "core/generator.h"
#include "core/grad_mode.h"
#include "core/ops.h"
#include "core/parallel.h"

namespace kiln::profiler {

double measured_cpu_gemm_flops(std::string* description, int ranks) {
  NoGradGuard g;
  Generator own(1);  // not the run's generator: a resumed run must continue its random stream exactly
  Tensor a = randn({1024, 1024}, {}, &own), b = randn({1024, 1024}, {}, &own);
  for (int i = 0; i < 2; ++i) matmul(a, b);  // warm-up (the GEMM library compiles its kernels on first use)
  double best = 1e30;
  for (int i = 0; i < 8; ++i) {
    const auto t = std::chrono::steady_clock::now();
    matmul(a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count());
  }
  const double flops = 2.0 * 1024 * 1024 * 1024 / best;
  if (description)
    *description = fmt::format("measured f32 GEMM 1024^3 at {} threads: {:.0f} GFLOP/s{}", get_num_threads(), flops / 1e9,
                               ranks > 1 ? fmt::format(", x {} ranks", ranks) : "");
  return flops * ranks;
}

}  // namespace kiln::profiler
