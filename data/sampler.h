// Samplers decide which dataset indices an epoch visits and in what order. They are stateless:
// `indices(epoch)` is a pure function of the sampler's settings and the epoch, so every worker,
// process and rerun agrees on the order. A DistributedSampler (a rank's share of a per-epoch
// permutation) plugs in through the same interface.
#pragma once

#include <cstdint>
#include <vector>

namespace kiln::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  /// The dataset indices of `epoch`, in visiting order (deterministic, thread-safe).
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  /// How many indices every epoch yields.
  virtual int64_t size() const = 0;
};

/// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

/// A fresh permutation of 0..n-1 per epoch, drawn from a Philox stream keyed by (seed, epoch):
/// independent of the global generator, the thread count and the device.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }
  uint64_t seed() const { return seed_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

/// The permutation of 0..n-1 that RandomSampler(n, seed) visits in `epoch` (Fisher-Yates).
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace kiln::data
