// One EpochRun per begin(): the epoch's batch list, the workers and their queues. Worker w builds
// batches w, w + W, w + 2W, ... into its own queue of at most `prefetch` batches; the consumer
// takes batch b from queue b % W, so batches arrive in order and memory stays bounded.
#include "data/dataloader.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "core/parallel.h"

namespace kiln::data {
namespace detail {

class EpochRun {
 public:
  /// `batches` are the epoch's batches from number `first` on (a resumed epoch skips the rest).
  EpochRun(std::shared_ptr<Dataset> dataset, const DataLoaderOptions& opts, int64_t epoch,
           std::vector<std::vector<int64_t>> batches, int64_t first)
      : dataset_(std::move(dataset)),
        collate_(opts.collate),
        pin_memory_(opts.pin_memory),
        epoch_(epoch),
        first_(first),
        batches_(std::move(batches)),
        num_workers_(opts.num_workers),
        prefetch_(opts.prefetch),
        queues_(static_cast<size_t>(opts.num_workers)) {}

  ~EpochRun() { stop(); }

  /// Launches the workers and loads batch 0 (or finishes at once for an empty epoch).
  void start() {
    const int64_t n = num_batches();
    const int workers = static_cast<int>(std::min<int64_t>(num_workers_, n));
    try {
      for (int w = 0; w < workers; ++w) threads_.emplace_back([this, w] { worker_loop(w); });
    } catch (...) {
      stop();
      throw;
    }
    advance();
  }

  void advance() {
    if (next_ >= num_batches()) {
      done_ = true;
      current_ = Example();
      stop();  // every worker has finished its share: join them now
      return;
    }
    const int64_t b = next_++;
    try {
      current_ = num_workers_ == 0 ? build_or_rethrow(b) : take(b);
    } catch (...) {
      done_ = true;  // a failed epoch cannot go on: it ends here
      current_ = Example();
      stop();
      throw;
    }
    index_ = first_ + b;
  }

  bool done() const { return done_; }
  Example& current() {
    KILN_CHECK(!done_, "DataLoader: dereferencing the end of an epoch");
    return current_;
  }
  int64_t index() const { return index_; }

 private:
  struct Slot {
    Example batch;
    std::exception_ptr error;
  };
  struct Queue {
    std::mutex mu;
    std::condition_variable ready, space;  // the consumer waits on `ready`, the worker on `space`
    std::deque<Slot> slots;
  };

  int64_t num_batches() const { return static_cast<int64_t>(batches_.size()); }

  Example build(int64_t b) const {
    Example batch = collate(b);
    if (pin_memory_) {
      if (batch.data.defined() && batch.data.device().is_cpu()) batch.data = pin_memory(batch.data);
      if (batch.target.defined() && batch.target.device().is_cpu()) batch.target = pin_memory(batch.target);
    }
    return batch;
  }

  Example collate(int64_t b) const {
    const std::vector<int64_t>& idx = batches_[static_cast<size_t>(b)];
    if (!collate_) return dataset_->get_batch(idx);
    std::vector<Example> examples;
    examples.reserve(idx.size());
    for (int64_t i : idx) examples.push_back(dataset_->get(i));
    return collate_(std::move(examples));
  }

  [[noreturn]] void rethrow(int64_t b, std::exception_ptr error) const {
    const std::vector<int64_t>& idx = batches_[static_cast<size_t>(b)];
    std::vector<int64_t> head(idx.begin(), idx.begin() + std::min<size_t>(idx.size(), 8));
    std::string where = fmt::format("DataLoader: batch {} of epoch {} (dataset indices {}{}){}", first_ + b, epoch_, head,
                                    idx.size() > head.size() ? " ..." : "",
                                    num_workers_ ? fmt::format(" in worker {}", b % num_workers_) : "");
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      fail("{} failed: {}", where, e.what());
    } catch (...) {
      fail("{} failed with a non-standard exception", where);
    }
  }

  Example build_or_rethrow(int64_t b) const {
    try {
      return build(b);
    } catch (...) {
      rethrow(b, std::current_exception());
    }
  }

  void worker_loop(int w) {
    // Workers already run in parallel with each other and the training loop: one thread each
    // keeps them from oversubscribing the cores.
    set_thread_local_num_threads(1);
    Queue& q = queues_[static_cast<size_t>(w)];
    for (int64_t b = w; b < num_batches(); b += num_workers_) {
      {
        std::unique_lock<std::mutex> lk(q.mu);
        q.space.wait(lk, [&] { return stop_.load() || static_cast<int>(q.slots.size()) < prefetch_; });
        if (stop_) return;
      }
      Slot slot;
      try {
        slot.batch = build(b);
      } catch (...) {
        slot.error = std::current_exception();
      }
      const bool failed = slot.error != nullptr;
      {
        std::lock_guard<std::mutex> lk(q.mu);
        if (stop_) return;
        q.slots.push_back(std::move(slot));
      }
      q.ready.notify_one();
      if (failed) return;  // the consumer rethrows when it reaches this batch
    }
  }

  Example take(int64_t b) {
    Queue& q = queues_[static_cast<size_t>(b % num_workers_)];
    Slot slot;
    {
      std::unique_lock<std::mutex> lk(q.mu);
      q.ready.wait(lk, [&] { return !q.slots.empty(); });
      slot = std::move(q.slots.front());
      q.slots.pop_front();
    }
    q.space.notify_one();
    if (slot.error) rethrow(b, slot.error);
    return std::move(slot.batch);
  }

  void stop() {
    stop_ = true;
    for (Queue& q : queues_) {
      { std::lock_guard<std::mutex> lk(q.mu); }  // a worker between its check and its wait sees stop_
      q.space.notify_all();
    }
    for (std::thread& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }

  std::shared_ptr<Dataset> dataset_;
  std::function<Example(std::vector<Example>)> collate_;
  bool pin_memory_;
  int64_t epoch_;
  int64_t first_;  // the epoch's batch number of batches_[0]
  std::vector<std::vector<int64_t>> batches_;
  int num_workers_;
  int prefetch_;
  std::vector<Queue> queues_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  int64_t next_ = 0, index_ = -1;
  bool done_ = false;
  Example current_;
};

}  // namespace detail

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  KILN_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  KILN_CHECK(options_.batch_size >= 1, "DataLoader: batch_size must be at least 1, got {}", options_.batch_size);
  KILN_CHECK(options_.num_workers >= 0, "DataLoader: num_workers must be non-negative, got {}",
             options_.num_workers);
  KILN_CHECK(options_.prefetch >= 1, "DataLoader: prefetch must be at least 1, got {}", options_.prefetch);
  KILN_CHECK(!(options_.sampler && options_.shuffle),
             "DataLoader: shuffle and a custom sampler are mutually exclusive (shuffle in the sampler)");
  if (options_.sampler) {
    sampler_ = options_.sampler;
  } else if (options_.shuffle) {
    if (!options_.seed) {
      GeneratorState s = default_generator().reserve(1);
      auto w = philox4x32(s.seed, s.offset);
      options_.seed = (uint64_t(w[0]) << 32) | w[1];
    }
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), *options_.seed);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

DataLoader::~DataLoader() = default;

int64_t DataLoader::size() const {
  const int64_t n = sampler_->size(), bs = options_.batch_size;
  return options_.drop_last ? n / bs : (n + bs - 1) / bs;
}

std::vector<std::vector<int64_t>> DataLoader::batch_indices(int64_t epoch) const {
  std::vector<int64_t> order = sampler_->indices(epoch);
  KILN_CHECK(static_cast<int64_t>(order.size()) == sampler_->size(),
             "DataLoader: the sampler gave {} indices for epoch {} but its size() is {}", order.size(), epoch,
             sampler_->size());
  const int64_t bs = options_.batch_size, nb = size();
  std::vector<std::vector<int64_t>> batches(static_cast<size_t>(nb));
  for (int64_t b = 0; b < nb; ++b) {
    auto first = order.begin() + b * bs;
    auto last = order.begin() + std::min<int64_t>((b + 1) * bs, static_cast<int64_t>(order.size()));
    batches[static_cast<size_t>(b)].assign(first, last);
  }
  return batches;
}

DataLoader::Iterator DataLoader::begin() {
  const int64_t epoch = epoch_++, first = start_batch_;
  start_batch_ = 0;
  std::vector<std::vector<int64_t>> batches = batch_indices(epoch);
  batches.erase(batches.begin(), batches.begin() + first);
  auto run = std::make_shared<detail::EpochRun>(dataset_, options_, epoch, std::move(batches), first);
  run->start();
  return Iterator(std::move(run));
}

void DataLoader::set_start_batch(int64_t batch) {
  KILN_CHECK(batch >= 0 && batch <= size(), "DataLoader: start batch {} is outside the epoch's 0..{} batches", batch,
             size());
  start_batch_ = batch;
}

bool DataLoader::Iterator::at_end() const { return !run_ || run_->done(); }

Example& DataLoader::Iterator::operator*() const {
  KILN_CHECK(run_ != nullptr, "DataLoader: dereferencing the end iterator");
  return run_->current();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  KILN_CHECK(!at_end(), "DataLoader: incrementing past the end of the epoch");
  run_->advance();
  return *this;
}

bool DataLoader::Iterator::operator==(const Iterator& other) const {
  if (at_end() || other.at_end()) return at_end() == other.at_end();
  return run_ == other.run_;
}

int64_t DataLoader::Iterator::batch_index() const { return run_ ? run_->index() : -1; }

}  // namespace kiln::data
