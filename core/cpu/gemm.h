// Serial dense GEMM for CPU kernels: c[M, N] (row-major, leading dim ldc) = a @ b, or += with
// `accumulate`. a is [M, K] and b is [K, N], each row- or column-major with its leading dim, so
// transposed views cost no copy. Threading is the caller's business (split the output).
//
// float picks its instruction set at run time, as PyTorch's CPU_CAPABILITY does: Eigen's kernel
// compiled for AVX-512 when the CPU has it, else the build's baseline (AVX2 in the default
// x86-64-v3 build). KILN_CPU_ISA=avx2 forces the baseline.
//
// Large float products can go to a BLAS library instead (the "library slot"): oneDNN's
// dnnl_sgemm, loaded at run time from Debian's libdnnl2 where it is installed (tools/bazel
// installs it), unless KILN_GEMM=eigen (KILN_GEMM=onednn fails where it cannot load). On the
// GPT's products it runs at 1.00-1.17x Eigen's speed (docs/benchmarks.md); small products, where
// its per-call cost shows, stay on Eigen, and so does f64. The caller decides
// per whole product (sgemm_library_takes) and splits it into slabs that do not depend on the
// thread count (matmul_kernel.cc), since oneDNN's kernels round differently at other slab sizes.
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

/// The library in the slot ("oneDNN 2.6.3"), or "" when none is loaded (Eigen runs everything).
const char* sgemm_library();
/// Rows below which a product stays on Eigen.
inline constexpr int64_t kLibraryMinRows = 256;
/// Whether a whole float product c[M, N] = a[M, K] @ b[K, N] goes to the library: one is loaded,
/// M >= kLibraryMinRows, N and K >= 64.
bool sgemm_library_takes(int64_t M, int64_t N, int64_t K);
/// sgemm through the library, serial on the calling thread; fails when none is loaded.
void sgemm_library_run(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, float* c, int64_t ldc,
                       bool accumulate);

/// The indices a row m of a triangular product keeps: [m + lo, m + hi] (clipped to the product).
struct Band {
  static constexpr int64_t kAll = int64_t{1} << 40;
  int64_t lo = -kAll, hi = kAll;
};

/// c[m, n] (+)= sum_k a(m, k) b[k, n] for m < M, n < N, k < K: the small products inside fused
/// attention (K a head dim or a block of keys) and a convolution's per-image products (forward
/// and input gradient), where packing both operands costs about as much as the multiplies.
/// a(m, k) = a[m * sam + k * sak] with sam == 1 or sak == 1 (a transposed tile costs nothing);
/// b's rows are contiguous, ldb apart. Causal attention's triangles: row m of c needs only the
/// columns in `n_band` (the others, up to whole 16-column vectors, are left unspecified), and
/// the caller guarantees a(m, k) == 0 outside `k_band` (a tile of rows skips the k outside all
/// of its rows' bands). float runs an AVX-512 kernel without packing where the CPU has it;
/// otherwise, and for double, it is gemm() over the whole product.
void sgemm_small(int64_t M, int64_t N, int64_t K, const float* a, int64_t sam, int64_t sak, const float* b,
                 int64_t ldb, float* c, int64_t ldc, bool accumulate, Band n_band = {}, Band k_band = {});
void dgemm_small(int64_t M, int64_t N, int64_t K, const double* a, int64_t sam, int64_t sak, const double* b,
                 int64_t ldb, double* c, int64_t ldc, bool accumulate, Band n_band = {}, Band k_band = {});

template <class T>
inline void small_gemm(int64_t M, int64_t N, int64_t K, const T* a, int64_t sam, int64_t sak, const T* b, int64_t ldb,
                       T* c, int64_t ldc, bool accumulate, Band n_band = {}, Band k_band = {}) {
  if constexpr (sizeof(T) == 4) sgemm_small(M, N, K, a, sam, sak, b, ldb, c, ldc, accumulate, n_band, k_band);
  else dgemm_small(M, N, K, a, sam, sak, b, ldb, c, ldc, accumulate, n_band, k_band);
}

template <class T>
inline void gemm(int64_t M, int64_t N, int64_t K, GemmOperand a, GemmOperand b, T* c, int64_t ldc, bool accumulate) {
  if constexpr (sizeof(T) == 4) sgemm(M, N, K, a, b, c, ldc, accumulate);
  else dgemm(M, N, K, a, b, c, ldc, accumulate);
}

}  // namespace kiln::cpu
