// The Eigen GEMM behind gemm.h, as a template each instruction-set translation unit compiles.
// Include only from gemm.cc / gemm_avx512.cc (the latter renames Eigen's namespace first).
#pragma once

#include <Eigen/Core>

#include <cstdint>

#include "core/cpu/gemm.h"

// Each instruction-set unit compiles this template into its own namespace (and Eigen's), so no
// symbol of one build can stand in for the other's at link time.
#ifndef KILN_GEMM_NAMESPACE
#define KILN_GEMM_NAMESPACE gemm_baseline
#endif

namespace kiln::cpu::KILN_GEMM_NAMESPACE {

template <class T>
void eigen_gemm(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, T* c, int64_t ldc, bool accumulate) {
  using Stride = Eigen::OuterStride<>;
  using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  Eigen::Map<RowMat, 0, Stride> C(c, M, N, Stride(ldc));
  const T* pa = static_cast<const T*>(a.data);
  const T* pb = static_cast<const T*>(b.data);
  auto with_a = [&](const auto& A) {
    auto run = [&](const auto& B) {
      if (accumulate) C.noalias() += A * B;
      else C.noalias() = A * B;
    };
    if (b.row_major) run(Eigen::Map<const RowMat, 0, Stride>(pb, K, N, Stride(b.ld)));
    else run(Eigen::Map<const ColMat, 0, Stride>(pb, K, N, Stride(b.ld)));
  };
  if (a.row_major) with_a(Eigen::Map<const RowMat, 0, Stride>(pa, M, K, Stride(a.ld)));
  else with_a(Eigen::Map<const ColMat, 0, Stride>(pa, M, K, Stride(a.ld)));
}

}  // namespace kiln::cpu::KILN_GEMM_NAMESPACE
