// gemm.h's small_gemm for CPUs with AVX-512 (compiled with -march=x86-64-v4, called only after
// gemm.cc's CPU check): the products inside fused attention, a few hundred rows by a head dim or
// a block of keys, where packing both operands (as a general GEMM does) costs about as much as
// the multiplies. Nothing is packed here: b's rows are read as they are, a's elements are
// broadcast from wherever they lie, and a tile of 6 rows x 64 columns stays in 24 registers over
// the whole depth. Everything lives in namespace gemm_avx512 or is internal, so nothing of this
// unit can stand in for baseline code at link time (//tests/core:avx512_isolation_test).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "core/cpu/gemm.h"

namespace kiln::cpu {
namespace gemm_avx512 {
namespace {

constexpr int kRows = 6;     // rows of c per tile
constexpr int kVectors = 4;  // 16-float vectors of c per tile row (64 columns)

// The tile's loops unrolled before GCC's scalar replacement runs, so the accumulators live in
// registers: without it GCC keeps the array in memory and stores all 24 vectors every step.
#define UNROLL _Pragma("GCC unroll 8")

/// c[m, 0:16 * NV) (+)= sum over k in [k0, k1) of a(m, k) b[k, 0:16 * NV) for m < MR; the last
/// vector holds only the columns in `tail`.
template <int MR, int NV>
void tile(int64_t k0, int64_t k1, const float* a, int64_t sam, int64_t sak, const float* b, int64_t ldb, float* c,
          int64_t ldc, bool accumulate, __mmask16 tail) {
  __m512 acc[MR][NV];
  UNROLL for (int m = 0; m < MR; ++m)
    UNROLL for (int v = 0; v < NV; ++v) {
      const __mmask16 mask = v == NV - 1 ? tail : __mmask16(0xFFFF);
      acc[m][v] = accumulate ? _mm512_maskz_loadu_ps(mask, c + m * ldc + 16 * v) : _mm512_setzero_ps();
    }
  const float* row[MR];
  UNROLL for (int m = 0; m < MR; ++m) row[m] = a + m * sam;
  for (int64_t k = k0; k < k1; ++k) {
    const float* bk = b + k * ldb;
    __m512 bv[NV];
    UNROLL for (int v = 0; v < NV - 1; ++v) bv[v] = _mm512_loadu_ps(bk + 16 * v);
    bv[NV - 1] = _mm512_maskz_loadu_ps(tail, bk + 16 * (NV - 1));
    const int64_t ka = k * sak;
    UNROLL for (int m = 0; m < MR; ++m) {
      const __m512 am = _mm512_set1_ps(row[m][ka]);
      UNROLL for (int v = 0; v < NV; ++v) acc[m][v] = _mm512_fmadd_ps(am, bv[v], acc[m][v]);
    }
  }
  UNROLL for (int m = 0; m < MR; ++m)
    UNROLL for (int v = 0; v < NV; ++v)
      _mm512_mask_storeu_ps(c + m * ldc + 16 * v, v == NV - 1 ? tail : __mmask16(0xFFFF), acc[m][v]);
}

using Tile = void (*)(int64_t, int64_t, const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t, bool,
                      __mmask16);

template <int MR> Tile tile_of(int64_t nv) {
  switch (nv) {
    case 1: return &tile<MR, 1>;
    case 2: return &tile<MR, 2>;
    case 3: return &tile<MR, 3>;
    default: return &tile<MR, 4>;
  }
}

/// The tile of mr rows (1 to kRows) and nv vectors (1 to kVectors).
Tile tile_for(int64_t mr, int64_t nv) {
  static_assert(kRows == 6 && kVectors == 4, "tile_for lists the tile shapes");
  switch (mr) {
    case 1: return tile_of<1>(nv);
    case 2: return tile_of<2>(nv);
    case 3: return tile_of<3>(nv);
    case 4: return tile_of<4>(nv);
    case 5: return tile_of<5>(nv);
    default: return tile_of<6>(nv);
  }
}

}  // namespace
}  // namespace gemm_avx512

void sgemm_small_avx512(int64_t M, int64_t N, int64_t K, const float* a, int64_t sam, int64_t sak, const float* b,
                        int64_t ldb, float* c, int64_t ldc, bool accumulate, Band n_band, Band k_band) {
  using namespace gemm_avx512;
  for (int64_t m0 = 0; m0 < M; m0 += kRows) {
    const int64_t mr = std::min<int64_t>(kRows, M - m0), last = m0 + mr - 1;
    // What any row of the tile needs: columns (whole vectors from an aligned start) and depth.
    const int64_t n_lo = std::max<int64_t>(0, m0 + n_band.lo) / 16 * 16;
    const int64_t n_hi = std::min<int64_t>(N, last + n_band.hi + 1);
    const int64_t k_lo = std::max<int64_t>(0, m0 + k_band.lo);
    const int64_t k_hi = std::max(k_lo, std::min<int64_t>(K, last + k_band.hi + 1));
    for (int64_t n0 = n_lo; n0 < n_hi; n0 += 16 * kVectors) {
      const int64_t nc = std::min<int64_t>(16 * kVectors, n_hi - n0), nv = (nc + 15) / 16;
      const int rest = static_cast<int>(nc - 16 * (nv - 1));
      const __mmask16 tail = static_cast<__mmask16>((1u << rest) - 1u);
      tile_for(mr, nv)(k_lo, k_hi, a + m0 * sam, sam, sak, b + n0, ldb, c + m0 * ldc + n0, ldc, accumulate,
                             tail);
    }
  }
}

}  // namespace kiln::cpu
