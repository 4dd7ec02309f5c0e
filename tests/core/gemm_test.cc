// The dispatched GEMM (AVX-512 where the CPU has it) against an f64 reference, for every
// operand layout and with accumulation.
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "core/cpu/gemm.h"
#include "tests/testing/compare.h"

using namespace kiln;

TEST_CASE("sgemm matches a double-precision reference in every layout") {
  MESSAGE("sgemm runs the ", std::string(cpu::sgemm_isa()), " kernel on this machine");
  manual_seed(11);
  for (auto [M, N, K] : {std::array<int64_t, 3>{37, 53, 71}, {128, 256, 784}, {1, 9, 5}}) {
    for (bool ar : {true, false})
      for (bool br : {true, false})
        for (bool acc : {false, true}) {
          std::vector<float> a = rand({M * K}).to_vector<float>(), b = randn({K * N}).to_vector<float>();
          std::vector<float> c = randn({M * N}).to_vector<float>();
          const std::vector<float> c0 = c;
          auto A = [&](int64_t i, int64_t k) { return ar ? a[i * K + k] : a[k * M + i]; };
          auto B = [&](int64_t k, int64_t j) { return br ? b[k * N + j] : b[j * K + k]; };
          cpu::sgemm(M, N, K, {a.data(), ar, ar ? K : M}, {b.data(), br, br ? N : K}, c.data(), N, acc);
          double worst = 0;
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              double ref = acc ? c0[i * N + j] : 0.0;
              for (int64_t k = 0; k < K; ++k) ref += static_cast<double>(A(i, k)) * B(k, j);
              worst = std::max(worst, std::fabs(ref - c[i * N + j]) / (1.0 + std::fabs(ref)));
            }
          CHECK_MESSAGE(worst < 1e-4, "M=", M, " N=", N, " K=", K, " a_row=", ar, " b_row=", br, " acc=", acc);
        }
  }
}
