// The GEMM operand decisions without a GPU: expanded (stride 0) and overlapping matrices are
// refused (copied by the caller) instead of given a raised leading dimension; row- and
// column-major matrices and size-1 dimensions are read in place; pointer alignments for cuBLASLt.
#include <doctest/doctest.h>

#include "cuda/gemm_layout.h"

using kiln::cuda::blas_layout;
using kiln::cuda::gemm_pointer_alignment;

TEST_CASE("row- and column-major matrices are read in place with their own leading dimension") {
  auto rm = blas_layout(4, 6, 6, 1);
  REQUIRE(rm);
  CHECK(!rm->transposed);
  CHECK(rm->ld == 6);
  auto padded = blas_layout(4, 6, 10, 1);  // a row slice of a wider matrix
  REQUIRE(padded);
  CHECK(padded->ld == 10);
  auto cm = blas_layout(4, 6, 1, 4);
  REQUIRE(cm);
  CHECK(cm->transposed);
  CHECK(cm->ld == 4);
}

TEST_CASE("expanded operands are refused, not given a raised leading dimension") {
  // What sum's backward hands to bmm: g.expand({M, N}) from one value, a row or a column.
  CHECK(!blas_layout(5, 3, 0, 0));  // a scalar expanded
  CHECK(!blas_layout(5, 3, 0, 1));  // one row repeated (M rows read as 1)
  CHECK(!blas_layout(5, 3, 1, 0));  // one column repeated
  CHECK(!blas_layout(5, 1, 0, 1));  // out_features == 1: [M, 1] from one value
  CHECK(!blas_layout(5, 1, 0, 0));
  CHECK(!blas_layout(1, 7, 0, 0));  // M == 1: [1, N] from one value
  CHECK(!blas_layout(4, 6, 3, 1));  // overlapping rows
}

TEST_CASE("a dimension of size 1 puts no constraint on its stride") {
  auto row = blas_layout(1, 7, 0, 1);  // one row, its row stride unused
  REQUIRE(row);
  CHECK(!row->transposed);
  CHECK(row->ld == 7);
  auto col = blas_layout(5, 1, 1, 0);  // one column, its column stride unused
  REQUIRE(col);
  CHECK(col->ld >= 1);
  auto one = blas_layout(1, 1, 0, 0);
  REQUIRE(one);
  CHECK(one->ld == 1);
  auto strided_col = blas_layout(5, 1, 3, 9);  // column of a wider matrix: rows 3 apart
  REQUIRE(strided_col);
  CHECK(!strided_col->transposed);
  CHECK(strided_col->ld == 3);
}

TEST_CASE("pointer alignment is the largest power of two up to 256 dividing the address") {
  CHECK(gemm_pointer_alignment(0) == 256);
  CHECK(gemm_pointer_alignment(0x10000) == 256);
  CHECK(gemm_pointer_alignment(0x10000 + 16) == 16);
  CHECK(gemm_pointer_alignment(0x10000 + 128) == 128);
  CHECK(gemm_pointer_alignment(0x10000 + 240) == 16);
  CHECK(gemm_pointer_alignment(0x10000 + 96) == 32);
  CHECK(gemm_pointer_alignment(0x10000 + 4) == 4);
  CHECK(gemm_pointer_alignment(0x10001) == 1);
  for (uintptr_t off = 16; off <= 240; off += 16) CHECK(gemm_pointer_alignment(0x40000 + off) < 256);
}
