// Serial dense GEMM for CPU kernels: c[M, N] (row-major, leading dim ldc) = a @ b, or += with
// `accumulate`. a is [M, K] and b is [K, N], each row- or column-major with its leading dim, so
// transposed views cost no copy. Threading is the caller's business (split the output).
//
// float picks its instruction set at run time, as PyTorch's CPU_CAPABILITY does: Eigen's kernel
// compiled for AVX-512 when the CPU has it, else the build's baseline (AVX2 in the default
// x86-64-v3 build). KILN_CPU_ISA=avx2 forces the baseline.
#pragma once

#include <cstdint>

namespace kiln::cpu {

struct GemmOperand {
  const void* data;
  bool row_major;
  int64_t ld;
};

void sgemm(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float* c, int64_t ldc, bool accumulate);
void dgemm(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, double* c, int64_t ldc, bool accumulate);

/// "avx512" or "baseline": what sgemm runs on this machine.
const char* sgemm_isa();

template <class T>
inline void gemm(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, T* c, int64_t ldc, bool accumulate) {
  if constexpr (sizeof(T) == 4) sgemm(M, N, K, a, b, c, ldc, accumulate);
  else dgemm(M, N, K, a, b, c, ldc, accumulate);
}

}  // namespace kiln::cpu
