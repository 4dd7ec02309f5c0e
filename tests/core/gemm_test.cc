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

namespace {

/// small_gemm<T> against an f64 reference: both layouts of a, accumulation, and the bands of
/// causal attention (a zero outside k_band; only the columns in n_band compared).
template <class T> void check_small_gemm() {
  manual_seed(12);
  const cpu::Band all{};
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 1, 1},    {5, 15, 3},    {6, 64, 64}, {7, 17, 63},
                                                      {13, 65, 64}, {64, 130, 33}, {20, 40, 0},
                                                      // deep (a convolution's), with bands whose
                                                      // depth starts far in or is empty
                                                      {13, 150, 290}, {260, 70, 250}};
  const cpu::Band upper{-cpu::Band::kAll, 3}, lower{5, cpu::Band::kAll};
  for (auto [M, N, K] : shapes)
    for (bool a_rows : {true, false})
      for (bool acc : {false, true})
        for (auto [n_band, k_band] :
             std::vector<std::pair<cpu::Band, cpu::Band>>{{all, all}, {upper, upper}, {lower, lower}}) {
          // Padded leading dims, so the kernel must use them.
          const int64_t sam = a_rows ? K + 3 : 1, sak = a_rows ? 1 : M + 2, ldb = N + 5, ldc = N + 7;
          std::vector<T> a = randn({M * (K + 3) + K * (M + 2) + 1}, dtype_of<T>::value).template to_vector<T>();
          const std::vector<T> b = randn({K * ldb + 1}, dtype_of<T>::value).template to_vector<T>();
          std::vector<T> c = randn({M * ldc + 1}, dtype_of<T>::value).template to_vector<T>();
          const std::vector<T> c0 = c;
          auto in_band = [](const cpu::Band& band, int64_t m, int64_t x) {
            return x >= m + band.lo && x <= m + band.hi;
          };
          for (int64_t m = 0; m < M; ++m)  // a(m, k) is zero outside k_band: the caller's guarantee
            for (int64_t k = 0; k < K; ++k)
              if (!in_band(k_band, m, k)) a[m * sam + k * sak] = T(0);
          cpu::small_gemm<T>(M, N, K, a.data(), sam, sak, b.data(), ldb, c.data(), ldc, acc, n_band, k_band);
          double worst = 0;
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              if (!in_band(n_band, m, n)) continue;
              double ref = acc ? static_cast<double>(c0[m * ldc + n]) : 0.0;
              for (int64_t k = 0; k < K; ++k) ref += static_cast<double>(a[m * sam + k * sak]) * b[k * ldb + n];
              worst = std::max(worst, std::fabs(ref - c[m * ldc + n]) / (1.0 + std::fabs(ref)));
            }
          // float's rounding grows with the depth (a sum of K products of about 1 each).
          const double tol = (sizeof(T) == 4 ? 1e-5 : 1e-12) * static_cast<double>(std::max<int64_t>(1, K / 64));
          CHECK_MESSAGE(worst < tol, "M=", M, " N=", N, " K=", K, " a_rows=", a_rows,
                        " acc=", acc, " n_band=[", n_band.lo, ", ", n_band.hi, "]");
          // The AVX-512 kernel keeps each element's sum in one register over the whole depth: the
          // result is that of one chain of float FMAs in k order, bit for bit (so it does not
          // depend on how a caller splits the rows or columns between threads).
          if (sizeof(T) == 4 && std::string(cpu::sgemm_isa()) == "avx512") {
            int64_t differ = 0;
            for (int64_t m = 0; m < M; ++m)
              for (int64_t n = 0; n < N; ++n) {
                if (!in_band(n_band, m, n)) continue;
                T chain = acc ? c0[m * ldc + n] : T(0);
                for (int64_t k = 0; k < K; ++k) chain = std::fma(a[m * sam + k * sak], b[k * ldb + n], chain);
                differ += chain != c[m * ldc + n];
              }
            CHECK_MESSAGE(differ == 0, differ, " elements differ from one float FMA chain: M=", M, " N=", N, " K=", K);
          }
          // Columns past N and rows past M are not written.
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = N; n < ldc; ++n) REQUIRE(c[m * ldc + n] == c0[m * ldc + n]);
          REQUIRE(c[M * ldc] == c0[M * ldc]);
        }
}

}  // namespace

TEST_CASE("small_gemm (the attention kernels' products) matches a double-precision reference, bands included") {
  MESSAGE("float runs the ", std::string(cpu::sgemm_isa()), " kernel; double the gemm() path");
  check_small_gemm<float>();
  check_small_gemm<double>();
}
