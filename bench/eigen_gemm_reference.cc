// Eigen's own GEMM with Eigen's own OpenMP threading, built for this CPU, on the shapes
// core_bench measures: the reference Kiln's matmul is held to. A separate binary on purpose
// (Kiln builds Eigen serial).
// Usage: eigen_gemm_reference THREADS M K N [M K N ...]; prints one JSON line {"MxKxN": GFLOP/s}.
#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/timing.h"
#include "core/util/cli.h"

using kiln::bench::now_s;

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

int main(int argc, char** argv) {
  int threads = 1;
  std::vector<long> dims;
  kiln::cli::App app("Eigen's own OpenMP GEMM GFLOP/s per MxKxN shape, as one JSON line.", "eigen_gemm_reference");
  app.add_option("threads", threads, "OpenMP threads")->required()->check(kiln::cli::range(1, 4096));
  app.add_option("dims", dims, "M K N [M K N ...]")->required()->check(kiln::cli::range(1L, 1L << 20));
  if (int rc = kiln::cli::parse(app, argc, argv); rc >= 0) return rc;
  if (dims.size() % 3 != 0)
    return kiln::cli::usage_error(app, fmt::format("{} dims is not a list of M K N triples", dims.size()));
#if !defined(_OPENMP)
#error "build with -fopenmp: this reference must use Eigen's own threading"
#endif
  Eigen::setNbThreads(threads);
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (size_t i = 0; i + 2 < dims.size(); i += 3) {
    const long m = dims[i], k = dims[i + 1], n = dims[i + 2];
    RowMat a = RowMat::Random(m, k), b = RowMat::Random(k, n), c(m, n);
    c.noalias() = a * b;  // warm-up
    std::vector<double> ts;
    const double budget = 1.0, start = now_s();
    while (ts.size() < 7 || (now_s() - start < budget && ts.size() < 200)) {
      const double t0 = now_s();
      c.noalias() = a * b;
      ts.push_back(now_s() - t0);
    }
    std::sort(ts.begin(), ts.end());
    const double gflops = 2.0 * m * n * k / ts[ts.size() / 2] * 1e-9;
    const std::string key = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
    json[key] = gflops;
  }
  std::printf("%s\n", json.dump().c_str());
  return 0;
}
