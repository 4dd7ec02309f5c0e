// Transposing copies inside CPU kernels: the 8 x 8 register transpose of 32-bit elements that
// the tensor-level transposing copy (copy_kernels.cc) is built from, and transpose_rows for the
// small per-task operands (an attention head, a convolution's per-image gradient), where that
// copy would mean a tensor per task.
#pragma once

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>

namespace kiln::cpu {

#if defined(__AVX__)
/// d[k * ds + i] = s[i * ss + k] for an 8 x 8 block of 32-bit elements: eight row loads, three
/// rounds of shuffles, eight row stores (bits are only moved, never computed on).
inline void transpose8x8(const uint32_t* s, int64_t ss, uint32_t* d, int64_t ds) {
  auto ld = [&](int i) { return _mm256_loadu_ps(reinterpret_cast<const float*>(s + i * ss)); };
  const __m256 r0 = ld(0), r1 = ld(1), r2 = ld(2), r3 = ld(3), r4 = ld(4), r5 = ld(5), r6 = ld(6), r7 = ld(7);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  const __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  const __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0)), u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0)), u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0)), u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0)), u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  auto st = [&](int k, __m256 v) { _mm256_storeu_ps(reinterpret_cast<float*>(d + k * ds), v); };
  st(0, _mm256_permute2f128_ps(u0, u4, 0x20));
  st(1, _mm256_permute2f128_ps(u1, u5, 0x20));
  st(2, _mm256_permute2f128_ps(u2, u6, 0x20));
  st(3, _mm256_permute2f128_ps(u3, u7, 0x20));
  st(4, _mm256_permute2f128_ps(u0, u4, 0x31));
  st(5, _mm256_permute2f128_ps(u1, u5, 0x31));
  st(6, _mm256_permute2f128_ps(u2, u6, 0x31));
  st(7, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#endif

/// dst[e * ldd + r] = src[r * lds + e] for r < rows, e < cols. 32-bit elements move by 8 x 8
/// register transposes (transpose8x8); the rest, and other types, eight source rows at a time,
/// read along their length so that every store writes eight contiguous elements: one element per
/// store with a stride of ldd put each store on another cache line.
template <class T> void transpose_rows(const T* src, int64_t lds, int64_t rows, int64_t cols, T* dst, int64_t ldd) {
  int64_t vr = 0, vc = 0;  // covered by whole 8 x 8 blocks
#if defined(__AVX__)
  if constexpr (sizeof(T) == 4) {
    vr = rows - rows % 8, vc = cols - cols % 8;
    for (int64_t r0 = 0; r0 < vr; r0 += 8)
      for (int64_t e0 = 0; e0 < vc; e0 += 8)
        transpose8x8(reinterpret_cast<const uint32_t*>(src + r0 * lds + e0), lds,
                     reinterpret_cast<uint32_t*>(dst + e0 * ldd + r0), ldd);
  }
#endif
  for (int64_t r0 = 0; r0 < rows; r0 += 8) {
    const int64_t nb = std::min<int64_t>(8, rows - r0);
    const T* s = src + r0 * lds;
    for (int64_t e = r0 < vr ? vc : 0; e < cols; ++e) {
      T* d = dst + e * ldd + r0;
      for (int64_t i = 0; i < nb; ++i) d[i] = s[i * lds + e];
    }
  }
}

}  // namespace kiln::cpu
