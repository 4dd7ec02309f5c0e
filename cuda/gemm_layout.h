// Pure decisions about how a GEMM operand is handed to cuBLAS/cuBLASLt, kept apart from the
// CUDA calls so that CPU tests check them: which strides cuBLAS can read in place (and with
// which leading dimension), and the pointer alignment cuBLASLt may assume. No CUDA headers.
#pragma once

#include <cstdint>
#include <optional>

namespace kiln::cuda {

/// One [rows, cols] matrix (element (r, c) at r * row_stride + c * col_stride) as cuBLAS's
/// column-major operand: `transposed` (op T) reads it as a rows x cols matrix with leading
/// dimension `ld`; otherwise (op N) as its transpose, cols x rows with leading dimension `ld`.
struct BlasLayout {
  bool transposed = false;
  int64_t ld = 1;
};

/// The layout that reads exactly the matrix's elements in place, or nullopt when no legal
/// leading dimension (>= the column-major row count, >= 1) matches its strides, as for an
/// expanded (stride 0) or overlapping operand: the caller must then copy it. A dimension of
/// size 1 puts no constraint on its stride.
std::optional<BlasLayout> blas_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride);

/// The largest power of two, at most 256, that divides `address` (256 for 0): the alignment
/// cuBLASLt may assume of an operand (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES).
uint32_t gemm_pointer_alignment(uintptr_t address);

}  // namespace kiln::cuda
