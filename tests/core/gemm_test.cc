// The dispatched GEMM (AVX-512 where the CPU has it) and the GEMM library (oneDNN) against an
// f64 reference, for every operand layout and with accumulation.
#include <array>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/cpu/gemm.h"
#include "tests/testing/compare.h"

using namespace kiln;

namespace {

using Sgemm = void (*)(int64_t, int64_t, int64_t, cpu::GemmOperand, cpu::GemmOperand, float*, int64_t, bool);

/// `gemm` against an f64 reference for every operand layout, with and without accumulation.
void check_layouts(Sgemm gemm, const std::vector<std::array<int64_t, 3>>& shapes) {
  manual_seed(11);
  for (auto [M, N, K] : shapes) {
    for (bool ar : {true, false})
      for (bool br : {true, false})
        for (bool acc : {false, true}) {
          std::vector<float> a = rand({M * K}).to_vector<float>(), b = randn({K * N}).to_vector<float>();
          std::vector<float> c = randn({M * N}).to_vector<float>();
          const std::vector<float> c0 = c;
          auto A = [&](int64_t i, int64_t k) { return ar ? a[i * K + k] : a[k * M + i]; };
          auto B = [&](int64_t k, int64_t j) { return br ? b[k * N + j] : b[j * K + k]; };
          gemm(M, N, K, {a.data(), ar, ar ? K : M}, {b.data(), br, br ? N : K}, c.data(), N, acc);
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

}  // namespace

TEST_CASE("sgemm matches a double-precision reference in every layout") {
  MESSAGE("sgemm runs the ", std::string(cpu::sgemm_isa()), " kernel on this machine");
  check_layouts(&cpu::sgemm, {{37, 53, 71}, {128, 256, 784}, {1, 9, 5}});
}

TEST_CASE("the GEMM library is loaded and matches a double-precision reference in every layout") {
  const char* choice = std::getenv("KILN_GEMM");
  if (choice != nullptr && std::string(choice) == "eigen") {
    MESSAGE("SKIPPED: KILN_GEMM=eigen turns the GEMM library off");
    CHECK(std::string(cpu::sgemm_library()).empty());
    return;
  }
  // tools/bazel installs Debian's libdnnl2 for every command, so a missing library is a broken set-up.
  REQUIRE_MESSAGE(!std::string(cpu::sgemm_library()).empty(),
                  "libdnnl.so.2 did not load: install Debian's libdnnl2 (tools/bazel does) or set KILN_GEMM=eigen");
  MESSAGE("large float products run on ", std::string(cpu::sgemm_library()));
  CHECK(cpu::sgemm_library_takes(cpu::kLibraryMinRows, 64, 64));
  CHECK_FALSE(cpu::sgemm_library_takes(cpu::kLibraryMinRows - 1, 64, 64));
  CHECK_FALSE(cpu::sgemm_library_takes(1024, 63, 1024));
  CHECK_FALSE(cpu::sgemm_library_takes(1024, 1024, 63));
  // Odd sizes and tails of the library's register blocks, a GPT-sized product, a single row.
  check_layouts(&cpu::sgemm_library_run, {{257, 67, 71}, {300, 1152, 384}, {1, 64, 64}});
}
