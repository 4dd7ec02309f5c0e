// CPU random fills: uniform, normal (Box–Muller), randint and bernoulli. Element i draws from
// Philox counter (offset + i) of a block reserved with gen.reserve(numel), so the values depend
// only on the seed and the generator's position, never on the thread count. The arguments were
// validated by core/ops/random.cc or creation.cc (the slots' contract in core/kernels.h).
#include <Eigen/Core>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "core/cpu/loops.h"
#include "core/half_array.h"
#include "core/kernels.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kRandomGrain = 16384;
constexpr double kTwoPi = 6.28318530717958647692;

/// Philox4x32-10 for kLanes consecutive counters at once, bit-identical to philox4x32 in
/// core/generator.h (random_test holds them equal). With AVX2 the rounds run 8 lanes per
/// instruction (_mm256_mul_epu32 gives the 32x32->64 products); elsewhere it is the scalar one.
constexpr int kLanes = 16;
struct PhiloxBlock {
  alignas(32) uint32_t w[4][kLanes];
};

#if defined(__AVX2__)
inline void philox_block(uint64_t seed, uint64_t counter, PhiloxBlock& out) {
  constexpr int V = kLanes / 8;
  __m256i c0[V], c1[V], c2[V], c3[V];
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  for (int v = 0; v < V; ++v) {
    const uint64_t base = counter + static_cast<uint64_t>(v) * 8;
    const __m256i base_lo = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(base)));
    const __m256i lo = _mm256_add_epi32(base_lo, iota);
    // Lanes whose low word wrapped carry into the high word (unsigned base_lo > lo).
    const __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(base_lo, sign), _mm256_xor_si256(lo, sign));
    c0[v] = lo;
    c1[v] = _mm256_sub_epi32(_mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(base >> 32))), carry);
    c2[v] = _mm256_setzero_si256();
    c3[v] = _mm256_setzero_si256();
  }
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    const __m256i kk0 = _mm256_set1_epi32(static_cast<int>(k0)), kk1 = _mm256_set1_epi32(static_cast<int>(k1));
    for (int v = 0; v < V; ++v) {
      // Even lanes' products from the low halves of each 64-bit slot, odd lanes' from the high.
      const __m256i pe0 = _mm256_mul_epu32(c0[v], m0), po0 = _mm256_mul_epu32(_mm256_srli_epi64(c0[v], 32), m0);
      const __m256i pe1 = _mm256_mul_epu32(c2[v], m1), po1 = _mm256_mul_epu32(_mm256_srli_epi64(c2[v], 32), m1);
      const __m256i lo0 = _mm256_blend_epi32(pe0, _mm256_slli_epi64(po0, 32), 0xAA);
      const __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(pe0, 32), po0, 0xAA);
      const __m256i lo1 = _mm256_blend_epi32(pe1, _mm256_slli_epi64(po1, 32), 0xAA);
      const __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(pe1, 32), po1, 0xAA);
      const __m256i n0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1[v]), kk0);
      const __m256i n2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3[v]), kk1);
      c1[v] = lo1;
      c3[v] = lo0;
      c0[v] = n0;
      c2[v] = n2;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  for (int v = 0; v < V; ++v) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(&out.w[0][v * 8]), c0[v]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(&out.w[1][v * 8]), c1[v]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(&out.w[2][v * 8]), c2[v]);
    _mm256_store_si256(reinterpret_cast<__m256i*>(&out.w[3][v * 8]), c3[v]);
  }
}
#else
inline void philox_block(uint64_t seed, uint64_t counter, PhiloxBlock& out) {
  for (int l = 0; l < kLanes; ++l) {
    auto w = philox4x32(seed, counter + static_cast<uint64_t>(l));
    for (int k = 0; k < 4; ++k) out.w[k][l] = w[k];
  }
}
#endif

/// Splits [0, n) across threads and calls body(i, m, block) for runs of m <= kLanes elements
/// starting at i, where block.w[.][j] are the words of counter st.offset + i + j.
template <class Body>
void for_each_block(int64_t n, const GeneratorState& st, const Body& body) {
  parallel_for(0, n, kRandomGrain, [&](int64_t b, int64_t e) {
    PhiloxBlock blk;
    for (int64_t i = b; i < e; i += kLanes) {
      philox_block(st.seed, st.offset + static_cast<uint64_t>(i), blk);
      body(i, std::min<int64_t>(kLanes, e - i), blk);
    }
  });
}

/// Random mantissa bits per dtype: a uniform value k * 2^-bits is exact in T, so [0, 1) never
/// rounds up to 1.
template <class T> constexpr int mantissa_bits() {
  if constexpr (std::is_same_v<T, double>) return 53;
  else if constexpr (std::is_same_v<T, float>) return 24;
  else if constexpr (std::is_same_v<T, Half>) return 11;
  else return 8;  // BFloat16
}

/// A uniform value in [0, 1) with T's precision from words w0 (high) and w1 (low).
template <class T> inline double unit_uniform(uint32_t w0, uint32_t w1) {
  constexpr int bits = mantissa_bits<T>();
  if constexpr (bits > 32) {
    uint64_t r = (static_cast<uint64_t>(w0) << 32 | w1) >> (64 - bits);
    return static_cast<double>(r) * (1.0 / static_cast<double>(uint64_t{1} << bits));
  } else {
    return static_cast<double>(w0 >> (32 - bits)) * (1.0 / static_cast<double>(uint64_t{1} << bits));
  }
}

void uniform_kernel(Tensor& out, Generator& gen, double low, double high) {
  const int64_t n = out.numel();
  const GeneratorState st = gen.reserve(static_cast<uint64_t>(n));
  KILN_DISPATCH_FLOATING(out.dtype(), "uniform", [&]<class T>() {
    T* o = static_cast<T*>(out.data_ptr());
    const double span = high - low;
    for_each_block(n, st, [&](int64_t i, int64_t m, const PhiloxBlock& blk) {
      for (int64_t j = 0; j < m; ++j) {
        T v = static_cast<T>(low + span * unit_uniform<T>(blk.w[0][j], blk.w[1][j]));
        // Rounding low + span * u may land on `high` itself; keep the interval half-open.
        if (static_cast<double>(v) >= high && high > low) v = static_cast<T>(low);
        o[i + j] = v;
      }
    });
  });
}

/// Box–Muller: writes m normals to dst from counters st.offset + first + [0, m). Philox fills
/// (u1, u2) for a block, then Eigen evaluates sqrt(-2 ln u1) * cos(2 pi u2) vectorised; u1 lies
/// in (0, 1], so the log is finite. The blocks are whole and aligned to the element index
/// (kBlock-wide, from a multiple of kBlock), so every element is computed by the same vector lane
/// of the same code whatever range a thread was given: Eigen's scalar tail (std::log, std::cos)
/// rounds differently from its packets, and a split that moved an element into the tail would
/// change its value with the thread count.
constexpr int64_t kNormalBlock = 256;  // a multiple of kLanes and of every SIMD packet

template <class C>
void normal_fill(C* dst, int64_t first, int64_t m, const GeneratorState& st, C mean, C std) {
  using Arr = Eigen::Array<C, Eigen::Dynamic, 1>;
  constexpr int64_t kBlock = kNormalBlock;
  alignas(64) C u1[kBlock], u2[kBlock], res[kBlock];
  PhiloxBlock pb;
  const int64_t end = first + m;
  for (int64_t g0 = first - first % kBlock; g0 < end; g0 += kBlock) {
    for (int64_t j0 = 0; j0 < kBlock; j0 += kLanes) {
      philox_block(st.seed, st.offset + static_cast<uint64_t>(g0 + j0), pb);
      for (int64_t l = 0; l < kLanes; ++l) {
        if constexpr (std::is_same_v<C, double>) {
          u1[j0 + l] = static_cast<double>(((static_cast<uint64_t>(pb.w[0][l]) << 32 | pb.w[1][l]) >> 11) + 1) *
                       0x1.0p-53;
          u2[j0 + l] = static_cast<double>((static_cast<uint64_t>(pb.w[2][l]) << 32 | pb.w[3][l]) >> 11) * 0x1.0p-53;
        } else {
          u1[j0 + l] = static_cast<float>((pb.w[0][l] >> 8) + 1) * 0x1.0p-24f;
          u2[j0 + l] = static_cast<float>(pb.w[1][l] >> 8) * 0x1.0p-24f;
        }
      }
    }
    Eigen::Map<Arr> a(u1, kBlock), c(u2, kBlock), out(res, kBlock);
    out = mean + std * ((C(-2) * a.log()).sqrt() * (C(kTwoPi) * c).cos());
    const int64_t lo = std::max(first, g0), hi = std::min(end, g0 + kBlock);
    std::copy(res + (lo - g0), res + (hi - g0), dst + (lo - first));
  }
}

void normal_kernel(Tensor& out, Generator& gen, double mean, double std) {
  const int64_t n = out.numel();
  const GeneratorState st = gen.reserve(static_cast<uint64_t>(n));
  KILN_DISPATCH_FLOATING(out.dtype(), "normal", [&]<class T>() {
    T* o = static_cast<T*>(out.data_ptr());
    parallel_for(0, n, kRandomGrain, [&](int64_t b, int64_t e) {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        normal_fill<T>(o + b, b, e - b, st, static_cast<T>(mean), static_cast<T>(std));
      } else {  // 16-bit: draw whole blocks in float, round them, keep this range's part
        // Whole aligned blocks go through the same conversion code at the same place wherever
        // the thread's range began (core/half_array.h's conversions equal the scalar ones too).
        alignas(64) float buf[kNormalBlock];
        T rounded[kNormalBlock];
        for (int64_t blk = b, next; blk < e; blk = next) {
          const int64_t g0 = blk - blk % kNormalBlock;
          next = std::min(e, g0 + kNormalBlock);
          normal_fill<float>(buf, g0, kNormalBlock, st, static_cast<float>(mean), static_cast<float>(std));
          if constexpr (std::is_same_v<T, Half>) float_to_half(buf, rounded, kNormalBlock);
          else float_to_bfloat16(buf, rounded, kNormalBlock);
          std::copy(rounded + (blk - g0), rounded + (next - g0), o + blk);
        }
      }
    });
  });
}

void randint_kernel(Tensor& out, Generator& gen, int64_t low, int64_t high) {
  const int64_t n = out.numel();
  const GeneratorState st = gen.reserve(static_cast<uint64_t>(n));
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  KILN_DISPATCH_NUMERIC(out.dtype(), "randint", [&]<class T>() {
    T* o = static_cast<T*>(out.data_ptr());
    for_each_block(n, st, [&](int64_t i, int64_t m, const PhiloxBlock& blk) {
      for (int64_t j = 0; j < m; ++j) {
        // 64 random bits make the modulo bias negligible for any range.
        uint64_t r = (static_cast<uint64_t>(blk.w[0][j]) << 32 | blk.w[1][j]) % range;
        o[i + j] = static_cast<T>(static_cast<int64_t>(static_cast<uint64_t>(low) + r));
      }
    });
  });
}

void bernoulli_kernel(Tensor& out, Generator& gen, double p) {
  const int64_t n = out.numel();
  const GeneratorState st = gen.reserve(static_cast<uint64_t>(n));
  KILN_DISPATCH_ALL(out.dtype(), "bernoulli", [&]<class T>() {
    T* o = static_cast<T*>(out.data_ptr());
    for_each_block(n, st, [&](int64_t i, int64_t m, const PhiloxBlock& blk) {
      for (int64_t j = 0; j < m; ++j) {
        double u = unit_uniform<double>(blk.w[0][j], blk.w[1][j]);
        o[i + j] = static_cast<T>(u < p ? 1 : 0);
      }
    });
  });
}

}  // namespace

KILN_REGISTER_KERNEL(uniform, DeviceType::CPU, &uniform_kernel);
KILN_REGISTER_KERNEL(normal, DeviceType::CPU, &normal_kernel);
KILN_REGISTER_KERNEL(randint, DeviceType::CPU, &randint_kernel);
KILN_REGISTER_KERNEL(bernoulli, DeviceType::CPU, &bernoulli_kernel);

}  // namespace kiln::cpu
