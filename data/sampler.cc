#include "data/sampler.h"

#include <numeric>

#include "core/error.h"
#include "core/generator.h"

namespace kiln::data {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  KILN_CHECK(n >= 0, "random_permutation: n must be non-negative, got {}", n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  // One key per (seed, epoch); each Philox block gives two 64-bit draws.
  const uint64_t key = splitmix64(seed ^ splitmix64(static_cast<uint64_t>(epoch) + 0x5EEDull));
  uint64_t counter = 0;
  std::array<uint32_t, 4> block{};
  int used = 2;
  for (int64_t i = n - 1; i > 0; --i) {
    if (used == 2) {
      block = philox4x32(key, counter++);
      used = 0;
    }
    uint64_t r = (uint64_t(block[2 * used]) << 32) | block[2 * used + 1];
    ++used;
    // Lemire's multiply-shift: j uniform in [0, i] up to a bias below n / 2^64.
    auto j = static_cast<int64_t>((static_cast<unsigned __int128>(r) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(p[i], p[j]);
  }
  return p;
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  KILN_CHECK(n >= 0, "SequentialSampler: size must be non-negative, got {}", n);
}

std::vector<int64_t> SequentialSampler::indices(int64_t /*epoch*/) const {
  std::vector<int64_t> p(static_cast<size_t>(n_));
  std::iota(p.begin(), p.end(), int64_t{0});
  return p;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  KILN_CHECK(n >= 0, "RandomSampler: size must be non-negative, got {}", n);
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const { return random_permutation(n_, seed_, epoch); }

}  // namespace kiln::data
