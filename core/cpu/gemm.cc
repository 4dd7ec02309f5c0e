#include "core/cpu/gemm.h"

#include "core/cpu/gemm_eigen.h"
#include "core/cpu/isa.h"
#include "core/error.h"

namespace kiln::cpu {

// Defined in gemm_avx512.cc (built only where the compiler can target AVX-512).
void sgemm_avx512(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float* c, int64_t ldc,
                  bool accumulate);

void sgemm_small_avx512(int64_t M, int64_t N, int64_t K, const float* a, int64_t sam, int64_t sak, const float* b,
                        int64_t ldb, float* c, int64_t ldc, bool accumulate, Band n_band, Band k_band);

void sgemm(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float* c, int64_t ldc, bool accumulate) {
#if defined(KILN_HAVE_AVX512)
  if (use_avx512()) return sgemm_avx512(M, N, K, a, b, c, ldc, accumulate);
#endif
  gemm_baseline::eigen_gemm<float>(M, N, K, a, b, c, ldc, accumulate);
}

void dgemm(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, double* c, int64_t ldc, bool accumulate) {
  gemm_baseline::eigen_gemm<double>(M, N, K, a, b, c, ldc, accumulate);
}

namespace {

/// small_gemm through gemm(): the whole product (the bands only allow skipping work).
template <class T>
void small_gemm_by_gemm(int64_t M, int64_t N, int64_t K, const T* a, int64_t sam, int64_t sak, const T* b,
                        int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  KILN_CHECK(sam == 1 || sak == 1, "small_gemm: a's strides ({}, {}) have no unit one", sam, sak);
  const GemmOperand ga = sak == 1 ? GemmOperand{a, true, sam} : GemmOperand{a, false, sak};
  gemm<T>(M, N, K, ga, {b, true, ldb}, c, ldc, accumulate);
}

}  // namespace

void sgemm_small(int64_t M, int64_t N, int64_t K, const float* a, int64_t sam, int64_t sak, const float* b,
                 int64_t ldb, float* c, int64_t ldc, bool accumulate, Band n_band, Band k_band) {
  if (M <= 0 || N <= 0) return;
#if defined(KILN_HAVE_AVX512)
  if (use_avx512()) return sgemm_small_avx512(M, N, K, a, sam, sak, b, ldb, c, ldc, accumulate, n_band, k_band);
#endif
  small_gemm_by_gemm(M, N, K, a, sam, sak, b, ldb, c, ldc, accumulate);
}

void dgemm_small(int64_t M, int64_t N, int64_t K, const double* a, int64_t sam, int64_t sak, const double* b,
                 int64_t ldb, double* c, int64_t ldc, bool accumulate, Band, Band) {
  if (M <= 0 || N <= 0) return;
  small_gemm_by_gemm(M, N, K, a, sam, sak, b, ldb, c, ldc, accumulate);
}

const char* sgemm_isa() { return use_avx512() ? "avx512" : "baseline"; }

}  // namespace kiln::cpu
