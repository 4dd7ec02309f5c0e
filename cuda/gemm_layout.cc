// The GEMM operand decisions of cuda/gemm_layout.h: leading-dimension legality and pointer
// alignment. Plain integer logic, built with or without the CUDA toolkit.
#include "cuda/gemm_layout.h"

#include <algorithm>

namespace kiln::cuda {

std::optional<BlasLayout> blas_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  // op N: column-major cols x rows, consecutive elements of a row adjacent, rows `ld` apart.
  if (col_stride == 1 || cols == 1) {
    const int64_t min_ld = std::max<int64_t>(cols, 1);
    if (rows == 1) return BlasLayout{false, min_ld};
    if (row_stride >= min_ld) return BlasLayout{false, row_stride};
  }
  // op T: column-major rows x cols, consecutive elements of a column adjacent, columns `ld` apart.
  if (row_stride == 1 || rows == 1) {
    const int64_t min_ld = std::max<int64_t>(rows, 1);
    if (cols == 1) return BlasLayout{true, min_ld};
    if (col_stride >= min_ld) return BlasLayout{true, col_stride};
  }
  return std::nullopt;
}

uint32_t gemm_pointer_alignment(uintptr_t address) {
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

}  // namespace kiln::cuda
