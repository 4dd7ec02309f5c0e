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
#include "bench/timing.h"

using kiln::bench::now_s;

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

int main(int argc, char** argv) {
  if (argc < 5 || (argc - 2) % 3 != 0) {
    std::fprintf(stderr, "usage: eigen_gemm_reference THREADS M K N [M K N ...]\n");
    return 2;
  }
#if !defined(_OPENMP)
#error "build with -fopenmp: this reference must use Eigen's own threading"
#endif
  Eigen::setNbThreads(std::atoi(argv[1]));
  std::string json = "{";
  for (int i = 2; i + 2 < argc; i += 3) {
    const long m = std::atol(argv[i]), k = std::atol(argv[i + 1]), n = std::atol(argv[i + 2]);
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
    json += (json.size() > 1 ? ", \"" : "\"") + key + "\": " + std::to_string(gflops);
  }
  std::printf("%s}\n", json.c_str());
  return 0;
}
