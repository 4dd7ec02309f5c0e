// DataLoader: batches of a Dataset in the order a Sampler gives, built by worker threads into
// bounded per-worker queues. Batch i of an epoch holds the same examples whatever the worker
// count (batch i is built by worker i % num_workers and consumed in order); a failing batch is
// rethrown in the consuming thread naming the batch; leaving a loop early stops and joins the
// workers without waiting for the rest of the epoch.
//
//   data::DataLoader loader(dataset, {.batch_size = 128, .shuffle = true, .num_workers = 2, .seed = 0});
//   for (int64_t epoch = 0; epoch < 10; ++epoch)
//     for (data::Example& batch : loader) train_step(batch.data, batch.target);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"

namespace kiln::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  /// A fresh permutation per epoch from (seed, epoch); mutually exclusive with `sampler`.
  bool shuffle = false;
  /// Drops the last batch when it would be smaller than batch_size.
  bool drop_last = false;
  /// 0: batches are built in the consuming thread when it asks for them.
  int num_workers = 0;
  /// Batches each worker may have ready ahead of the consumer.
  int prefetch = 2;
  /// Seed of the shuffling order; unset: drawn from kiln::default_generator() when the loader
  /// is built (so kiln::manual_seed fixes it too).
  std::optional<uint64_t> seed;
  /// Turns a batch's examples into one Example. Empty: Dataset::get_batch (stacking, with the
  /// gather fast path of tensor-backed datasets). When set, examples come from Dataset::get.
  std::function<Example(std::vector<Example>)> collate;
  /// Replaces the sequential/random choice (e.g. a DistributedSampler); receives the epoch.
  std::shared_ptr<Sampler> sampler;
  /// Puts each batch's tensors in page-locked memory (kiln::pin_memory, in the worker that
  /// builds it) so `.to("cuda")` copies run asynchronously; no effect without a usable GPU.
  bool pin_memory = false;
};

namespace detail {
class EpochRun;
}

class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  /// Input iterator over one epoch's batches. Copies share the epoch; when the last copy goes
  /// (the loop ended or broke), the epoch's workers are stopped and joined.
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Example;
    using difference_type = std::ptrdiff_t;
    using pointer = Example*;
    using reference = Example&;

    Iterator() = default;
    Example& operator*() const;
    Example* operator->() const { return &**this; }
    /// Waits for the next batch; rethrows a worker's failure naming the batch.
    Iterator& operator++();
    bool operator==(const Iterator& other) const;
    bool operator!=(const Iterator& other) const { return !(*this == other); }
    /// Index of the current batch within the epoch.
    int64_t batch_index() const;

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<detail::EpochRun> run) : run_(std::move(run)) {}
    bool at_end() const;
    std::shared_ptr<detail::EpochRun> run_;  // null: the end sentinel
  };

  /// Starts the next epoch (epoch() then advances) and waits for its first batch.
  Iterator begin();
  Iterator end() { return Iterator(); }

  /// Batches per epoch.
  int64_t size() const;
  /// The epoch the next begin() runs (0 for a new loader); set it when resuming training.
  int64_t epoch() const { return epoch_; }
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  /// Makes the next begin() skip the epoch's first `batch` batches (0 <= batch <= size()), as a
  /// run resumed mid-epoch needs: the remaining batches are exactly those an uninterrupted epoch
  /// would have yielded, with batch_index() counting from the epoch's start. Later epochs start
  /// at batch 0 again.
  void set_start_batch(int64_t batch);
  /// The batch the next begin() starts at (0 unless set_start_batch was called since).
  int64_t start_batch() const { return start_batch_; }
  /// The dataset indices of every batch of `epoch`, as the workers will load them.
  std::vector<std::vector<int64_t>> batch_indices(int64_t epoch) const;

  const std::shared_ptr<Dataset>& dataset() const { return dataset_; }
  const Sampler& sampler() const { return *sampler_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  int64_t epoch_ = 0;
  int64_t start_batch_ = 0;
};

}  // namespace kiln::data
