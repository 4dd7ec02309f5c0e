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

/// One rank's share of an epoch for data parallel training: the epoch's order (a permutation
/// keyed by (seed, epoch) when shuffling, else 0..n-1) is cut into `world_size` disjoint strided
/// shards (rank r takes positions r, r + W, r + 2W, ...) of equal length. Without drop_last the
/// order is padded by repeating its head so every rank gets ceil(n / W) indices; with drop_last
/// the tail is dropped and every rank gets floor(n / W). The epoch comes from the DataLoader, so
/// there is no set_epoch() to forget: every rank reshuffles identically each epoch.
class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t n, int rank, int world_size, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return per_rank_; }
  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

 private:
  int64_t n_;
  int rank_, world_size_;
  bool shuffle_;
  uint64_t seed_;
  bool drop_last_;
  int64_t per_rank_;
};

/// The permutation of 0..n-1 that RandomSampler(n, seed) visits in `epoch` (Fisher-Yates).
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace kiln::data
