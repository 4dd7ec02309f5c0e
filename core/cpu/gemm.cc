#include "core/cpu/gemm.h"

#include <cstdlib>
#include <cstring>

#include "core/cpu/gemm_eigen.h"

namespace kiln::cpu {

// Defined in gemm_avx512.cc (built only where the compiler can target AVX-512).
void sgemm_avx512(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float* c, int64_t ldc,
                  bool accumulate);

namespace {

bool use_avx512() {
#if defined(KILN_HAVE_AVX512_GEMM) && defined(__x86_64__)
  static const bool yes = [] {
    const char* isa = std::getenv("KILN_CPU_ISA");
    if (isa != nullptr && std::strcmp(isa, "avx512") != 0) return false;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }();
  return yes;
#else
  return false;
#endif
}

}  // namespace

void sgemm(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float* c, int64_t ldc, bool accumulate) {
#if defined(KILN_HAVE_AVX512_GEMM)
  if (use_avx512()) return sgemm_avx512(M, N, K, a, b, c, ldc, accumulate);
#endif
  gemm_baseline::eigen_gemm<float>(M, N, K, a, b, c, ldc, accumulate);
}

void dgemm(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, double* c, int64_t ldc, bool accumulate) {
  gemm_baseline::eigen_gemm<double>(M, N, K, a, b, c, ldc, accumulate);
}

const char* sgemm_isa() { return use_avx512() ? "avx512" : "baseline"; }

}  // namespace kiln::cpu
