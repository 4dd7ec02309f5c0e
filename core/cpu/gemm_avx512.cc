// sgemm for CPUs with AVX-512, compiled with -march=x86-64-v4 (see core/BUILD). Eigen's namespace
// and the template's are renamed here, so none of the code built for AVX-512 can be merged by the
// linker with the baseline build's copies of the same templates (which would put AVX-512
// instructions on AVX2-only hosts); //tests/core:avx512_isolation_test checks that this unit
// defines no other weak symbols.
#define Eigen kiln_eigen_avx512
#define KILN_GEMM_NAMESPACE gemm_avx512
#include "core/cpu/gemm_eigen.h"

namespace kiln::cpu {

void sgemm_avx512(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float* c, int64_t ldc,
                  bool accumulate) {
  gemm_avx512::eigen_gemm<float>(M, N, K, a, b, c, ldc, accumulate);
}

}  // namespace kiln::cpu
