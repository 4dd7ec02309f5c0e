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

DistributedSampler::DistributedSampler(int64_t n, int rank, int world_size, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : n_(n), rank_(rank), world_size_(world_size), shuffle_(shuffle), seed_(seed), drop_last_(drop_last) {
  KILN_CHECK(n >= 0, "DistributedSampler: size must be non-negative, got {}", n);
  KILN_CHECK(world_size >= 1, "DistributedSampler: world_size must be at least 1, got {}", world_size);
  KILN_CHECK(rank >= 0 && rank < world_size, "DistributedSampler: rank {} is out of range for world_size {}", rank,
             world_size);
  per_rank_ = drop_last ? n / world_size : (n + world_size - 1) / world_size;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order = shuffle_ ? random_permutation(n_, seed_, epoch) : SequentialSampler(n_).indices(epoch);
  const int64_t total = per_rank_ * world_size_;
  // Pad by wrapping around (more than once when n < world_size).
  for (int64_t i = n_; i < total; ++i) order.push_back(order[static_cast<size_t>((i - n_) % n_)]);
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  for (int64_t i = rank_; i < total; i += world_size_) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace kiln::data
