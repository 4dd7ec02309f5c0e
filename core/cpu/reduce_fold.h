// Shared pieces of the CPU reductions (core/cpu/reduce_kernels.cc: sum/mean/max/min/prod;
// core/cpu/arg_reduce_kernels.cc: argmax/argmin): the per-kind accumulation with vectorised
// folds of contiguous runs, the chunked parallel split, and the strided multi-index walk.
// f32 sums accumulate in double, f16/bf16 in float; integer sums in i64. NaN propagates in max/min.
#pragma once

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/kernels.h"
#include "core/parallel.h"

namespace kiln::cpu::reduce_detail {
// ---- per-kind arithmetic -------------------------------------------------------------------

/// What sums and products of T accumulate in.
template <class T> struct SumAcc { using type = std::conditional_t<std::is_integral_v<T>, int64_t, opmath_t<T>>; };
template <> struct SumAcc<float> { using type = double; };

template <ReduceKind K, class T>
using acc_t = std::conditional_t<K == ReduceKind::max || K == ReduceKind::min, opmath_t<T>,
                                 typename SumAcc<T>::type>;

template <ReduceKind K, class A> constexpr A identity() {
  if constexpr (K == ReduceKind::sum || K == ReduceKind::mean) return A(0);
  else if constexpr (K == ReduceKind::prod) return A(1);
  else if constexpr (K == ReduceKind::max)
    return std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                                : std::numeric_limits<A>::lowest();
  else
    return std::numeric_limits<A>::has_infinity ? std::numeric_limits<A>::infinity()
                                                : std::numeric_limits<A>::max();
}

/// a (+, *, max, min) v. For max/min a NaN operand wins and, once in `a`, stays (no comparison
/// with NaN is true).
template <ReduceKind K, class A> inline A step(A a, A v) {
  if constexpr (K == ReduceKind::sum || K == ReduceKind::mean) return a + v;
  else if constexpr (K == ReduceKind::prod) return a * v;
  else if constexpr (K == ReduceKind::max) return ((v > a) | (v != v)) ? v : a;
  else return ((v < a) | (v != v)) ? v : a;
}

template <ReduceKind K> constexpr bool is_minmax = K == ReduceKind::max || K == ReduceKind::min;

/// Widens n 16-bit floats to float (F16C's 8-wide conversion where the CPU has it).
inline void widen(const Half* p, float* out, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i))));
#endif
  for (; i < n; ++i) out[i] = static_cast<float>(p[i]);
}
inline void widen(const BFloat16* p, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i]);
}

// GCC does not vectorise the NaN-propagating select of max/min from scalar code, so those folds
// use vector-extension types (plain compare + blend on AVX2).
template <class A> struct VecOf {
  typedef A type __attribute__((vector_size(32)));  // an alias template would drop the attribute
};
template <class A> using Vec = typename VecOf<A>::type;
template <class A> constexpr int kVecWidth = 32 / sizeof(A);

template <ReduceKind K, class A> inline Vec<A> step_vec(Vec<A> a, Vec<A> v) {
  if constexpr (K == ReduceKind::max) return ((v > a) | (v != v)) ? v : a;
  else return ((v < a) | (v != v)) ? v : a;
}

template <class A> inline Vec<A> load_vec(const A* p) {
  Vec<A> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

/// acc[j] = step(acc[j], row[j]) for j < n.
template <ReduceKind K, class A> inline void step_row(A* acc, const A* row, int64_t n) {
  int64_t j = 0;
  if constexpr (is_minmax<K> && std::is_floating_point_v<A>) {
    constexpr int W = kVecWidth<A>;
    for (; j + W <= n; j += W) {
      Vec<A> v = step_vec<K, A>(load_vec(acc + j), load_vec(row + j));
      std::memcpy(acc + j, &v, sizeof(v));
    }
  }
  for (; j < n; ++j) acc[j] = step<K, A>(acc[j], row[j]);
}

/// Folds any number of contiguous runs into one result: independent accumulators (16 scalar
/// lanes, or four vectors for max/min) carried across runs so short runs cost little.
template <ReduceKind K, class T, class A, class Enable = void> class Folder {
 public:
  Folder() { std::fill(lane_, lane_ + L, identity<K, A>()); }
  void add(const T* p, int64_t n) {
    int64_t i = 0;
    for (; i + L <= n; i += L)
      for (int l = 0; l < L; ++l) lane_[l] = step<K, A>(lane_[l], static_cast<A>(p[i + l]));
    for (; i < n; ++i) tail_ = step<K, A>(tail_, static_cast<A>(p[i]));
  }
  A result() {
    // Pairwise over the lanes keeps rounding balanced.
    for (int w = L / 2; w >= 1; w /= 2)
      for (int l = 0; l < w; ++l) lane_[l] = step<K, A>(lane_[l], lane_[l + w]);
    return step<K, A>(lane_[0], tail_);
  }

 private:
  static constexpr int L = 16;
  A lane_[L];
  A tail_ = identity<K, A>();
};

/// max/min of floats or doubles: GCC does not vectorise the NaN-propagating select from scalar
/// code, so this uses vector-extension types (compare + blend on AVX2).
template <ReduceKind K, class A>
class Folder<K, A, A, std::enable_if_t<is_minmax<K> && std::is_floating_point_v<A>>> {
 public:
  Folder() {
    for (Vec<A>& v : acc_) v = Vec<A>{} + identity<K, A>();  // broadcast
  }
  void add(const A* p, int64_t n) {
    int64_t i = 0;
    for (; i + 4 * W <= n; i += 4 * W)
      for (int u = 0; u < 4; ++u) acc_[u] = step_vec<K, A>(acc_[u], load_vec(p + i + u * W));
    for (; i + W <= n; i += W) acc_[0] = step_vec<K, A>(acc_[0], load_vec(p + i));
    for (; i < n; ++i) tail_ = step<K, A>(tail_, p[i]);
  }
  A result() const {
    A r = tail_;
    for (int u = 0; u < 4; ++u)
      for (int l = 0; l < W; ++l) r = step<K, A>(r, acc_[u][l]);
    return r;
  }

 private:
  static constexpr int W = kVecWidth<A>;
  Vec<A> acc_[4];
  A tail_ = identity<K, A>();
};

/// f16 (and bf16 for max/min): widen a block at a time, then fold floats.
template <ReduceKind K, class T, class A>
class Folder<K, T, A, std::enable_if_t<std::is_same_v<T, Half> || (std::is_same_v<T, BFloat16> && is_minmax<K>)>> {
 public:
  void add(const T* p, int64_t n) {
    constexpr int64_t kChunk = 512;
    float buf[kChunk];
    for (int64_t i = 0; i < n; i += kChunk) {
      const int64_t len = std::min(kChunk, n - i);
      widen(p + i, buf, len);
      inner_.add(buf, len);
    }
  }
  A result() { return inner_.result(); }

 private:
  Folder<K, float, A> inner_;
};

template <ReduceKind K, class T, class A> A fold_contiguous(const T* p, int64_t n) {
  Folder<K, T, A> f;
  f.add(p, n);
  return f.result();
}

/// The most chunks run_chunks splits a reduction into: the partial results' arrays hold this many.
inline constexpr int kMaxChunks = 16;

/// Chunks run_chunks splits [0, n) into: n / grain, 1 to kMaxChunks. A function of n and grain
/// only, never of the thread count, so a reduction sums in the same order on any pool size.
inline int chunk_count(int64_t n, int64_t grain) {
  return static_cast<int>(std::clamp<int64_t>(n / std::max<int64_t>(grain, 1), 1, kMaxChunks));
}

/// Splits [0, n) into chunk_count(n, grain) chunks, runs f(chunk, begin, end) for each (in
/// parallel where the pool is free, in order on this thread inside a parallel region) and returns
/// the number of chunks. Callers combine the chunks' partial results in chunk order.
template <class F> int run_chunks(int64_t n, int64_t grain, const F& f) {
  const int k = chunk_count(n, grain);
  if (k == 1 || in_parallel_region() || get_num_threads() == 1) {
    for (int c = 0; c < k; ++c) f(c, n * c / k, n * (c + 1) / k);
    return k;
  }
  detail::run_chunks(k, [&](int64_t c) { f(static_cast<int>(c), n * c / k, n * (c + 1) / k); });
  return k;
}

// ---- geometry -----------------------------------------------------------------------------

/// A walk over a multi-index (row-major), tracking the element offset into two tensors.
class Walker {
 public:
  Walker(const Shape& sizes, const Shape& s0, const Shape& s1) : sizes_(sizes), s0_(s0), s1_(s1) {}
  void seek(int64_t linear) {
    idx_.assign(sizes_.size(), 0);
    off0_ = off1_ = 0;
    for (int64_t d = static_cast<int64_t>(sizes_.size()) - 1; d >= 0; --d) {
      idx_[d] = linear % sizes_[d];
      linear /= sizes_[d];
      off0_ += idx_[d] * s0_[d];
      off1_ += idx_[d] * s1_[d];
    }
  }
  void next() {
    for (int64_t d = static_cast<int64_t>(sizes_.size()) - 1; d >= 0; --d) {
      off0_ += s0_[d];
      off1_ += s1_[d];
      if (++idx_[d] < sizes_[d]) return;
      off0_ -= idx_[d] * s0_[d];
      off1_ -= idx_[d] * s1_[d];
      idx_[d] = 0;
    }
  }
  int64_t off0() const { return off0_; }
  int64_t off1() const { return off1_; }

 private:
  const Shape& sizes_;
  const Shape& s0_;
  const Shape& s1_;
  std::vector<int64_t> idx_;
  int64_t off0_ = 0, off1_ = 0;
};

}  // namespace kiln::cpu::reduce_detail
