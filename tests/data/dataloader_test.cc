// Datasets, samplers and the DataLoader: order, drop_last, determinism, identical batches for
// any worker count, every index once per epoch, early exit, and errors naming the batch.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "data/data.h"
#include "tests/data/data_test_util.h"

using namespace kiln;
using namespace kiln::data;

namespace {

/// Row i of data is [i, i + 0.5]; target i is i.
std::shared_ptr<TensorDataset> counting_dataset(int64_t n) {
  Tensor data = arange(0, n, 1, kFloat32).unsqueeze(1).expand({n, 2}).contiguous();
  data = data + tensor({0.0, 0.5});
  return std::make_shared<TensorDataset>(data, arange(0, n, 1, kInt64));
}

/// The targets of every batch of one epoch.
std::vector<std::vector<int64_t>> epoch_targets(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (Example& b : loader) {
    auto t = b.target.to_vector<int64_t>();
    auto d = b.data.to_vector<float>();
    REQUIRE(d.size() == 2 * t.size());
    for (size_t i = 0; i < t.size(); ++i) CHECK(d[2 * i] == static_cast<float>(t[i]));
    out.push_back(t);
  }
  return out;
}

std::vector<int64_t> flatten(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

DataLoaderOptions opts(int64_t batch_size, bool shuffle = false, int workers = 0) {
  DataLoaderOptions o;
  o.batch_size = batch_size;
  o.shuffle = shuffle;
  o.num_workers = workers;
  o.seed = 1234;
  return o;
}

/// A dataset without a get_batch override whose get throws at one index.
class FlakyDataset : public Dataset {
 public:
  FlakyDataset(int64_t n, int64_t bad) : n_(n), bad_(bad) {}
  Example get(int64_t i) const override {
    check_index(i);
    KILN_CHECK(i != bad_, "FlakyDataset: example {} is unreadable", i);
    return {full({3}, static_cast<double>(i)), scalar_tensor(i, kInt64)};
  }
  int64_t size() const override { return n_; }

 private:
  int64_t n_, bad_;
};

/// Every other index, offset by the epoch's parity: the shape a DistributedSampler takes.
class EvenOddSampler : public Sampler {
 public:
  explicit EvenOddSampler(int64_t n) : n_(n) {}
  std::vector<int64_t> indices(int64_t epoch) const override {
    std::vector<int64_t> v;
    for (int64_t i = epoch % 2; i < n_; i += 2) v.push_back(i);
    return v;
  }
  int64_t size() const override { return n_ / 2; }

 private:
  int64_t n_;
};

}  // namespace

TEST_CASE("TensorDataset gives rows and gathered batches; mismatched sizes are refused") {
  auto ds = counting_dataset(6);
  Example e = ds->get(4);
  CHECK(e.data.to_vector<float>() == std::vector<float>{4.0f, 4.5f});
  CHECK(e.target.item<int64_t>() == 4);
  Example b = ds->get_batch({5, 0, 5});
  CHECK(b.data.sizes() == Shape{3, 2});
  CHECK(b.target.to_vector<int64_t>() == std::vector<int64_t>{5, 0, 5});
  CHECK_ERROR_HAS(ds->get(6), "TensorDataset", "index 6", "6 examples");
  CHECK_ERROR_HAS(ds->get_batch({1, -1}), "index -1");
  CHECK_ERROR_HAS(TensorDataset(zeros({4, 2}), zeros({3})), "4 examples", "have 3");

  // The generic get_batch stacks get() results.
  FlakyDataset flaky(5, -1);
  Example s = flaky.get_batch({2, 4});
  CHECK(s.data.sizes() == Shape{2, 3});
  CHECK(s.target.to_vector<int64_t>() == std::vector<int64_t>{2, 4});
}

TEST_CASE("samplers: sequential order, and a seeded permutation per epoch") {
  CHECK(SequentialSampler(4).indices(7) == std::vector<int64_t>{0, 1, 2, 3});
  RandomSampler r(100, 42);
  auto e0 = r.indices(0), e1 = r.indices(1);
  CHECK(e0 == RandomSampler(100, 42).indices(0));
  CHECK(e0 != e1);
  CHECK(e0 != RandomSampler(100, 43).indices(0));
  for (auto p : {e0, e1}) {
    std::sort(p.begin(), p.end());
    for (int64_t i = 0; i < 100; ++i) CHECK(p[static_cast<size_t>(i)] == i);
  }
  CHECK(random_permutation(0, 1, 0).empty());
  CHECK(random_permutation(1, 1, 0) == std::vector<int64_t>{0});
}

TEST_CASE("DataLoader batches in order; drop_last drops the short batch") {
  auto ds = counting_dataset(23);
  DataLoader keep(ds, opts(5));
  CHECK(keep.size() == 5);
  auto batches = epoch_targets(keep);
  REQUIRE(batches.size() == 5);
  CHECK(batches[0] == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(batches[4] == std::vector<int64_t>{20, 21, 22});

  auto o = opts(5);
  o.drop_last = true;
  DataLoader drop(ds, o);
  CHECK(drop.size() == 4);
  batches = epoch_targets(drop);
  REQUIRE(batches.size() == 4);
  CHECK(batches[3] == std::vector<int64_t>{15, 16, 17, 18, 19});

  DataLoader big(ds, opts(100));
  CHECK(big.size() == 1);
  CHECK(epoch_targets(big)[0].size() == 23);
  o = opts(100);
  o.drop_last = true;
  DataLoader none(ds, o);
  CHECK(none.size() == 0);
  CHECK(none.begin() == none.end());
}

TEST_CASE("DataLoader shuffles every index exactly once per epoch, differently each epoch, reproducibly") {
  auto ds = counting_dataset(50);
  DataLoader a(ds, opts(8, true)), b(ds, opts(8, true));
  std::vector<int64_t> previous;
  for (int epoch = 0; epoch < 3; ++epoch) {
    CAPTURE(epoch);
    auto order = flatten(epoch_targets(a));
    CHECK(order == flatten(epoch_targets(b)));
    CHECK(order == flatten(a.batch_indices(epoch)));
    CHECK(order != previous);
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    REQUIRE(sorted.size() == 50);
    for (int64_t i = 0; i < 50; ++i) CHECK(sorted[static_cast<size_t>(i)] == i);
    previous = order;
  }
  CHECK(a.epoch() == 3);
  // Resuming at epoch 1 replays epoch 1's order.
  DataLoader c(ds, opts(8, true));
  c.set_epoch(1);
  CHECK(flatten(epoch_targets(c)) == flatten(a.batch_indices(1)));
  // Another seed, another order.
  auto o = opts(8, true);
  o.seed = 99;
  DataLoader d(ds, o);
  CHECK(flatten(epoch_targets(d)) != flatten(a.batch_indices(0)));
}

TEST_CASE("DataLoader without a seed follows kiln::manual_seed") {
  auto ds = counting_dataset(40);
  auto o = opts(10, true);
  o.seed.reset();
  manual_seed(7);
  DataLoader a(ds, o);
  manual_seed(7);
  DataLoader b(ds, o);
  CHECK(flatten(a.batch_indices(0)) == flatten(b.batch_indices(0)));
}

TEST_CASE("DataLoader gives the same batches with 0, 1 and 3 workers") {
  auto ds = counting_dataset(103);
  std::vector<std::vector<std::vector<int64_t>>> runs;
  for (int workers : {0, 1, 3}) {
    for (int prefetch : {1, 2, 5}) {
      auto o = opts(7, true, workers);
      o.prefetch = prefetch;
      DataLoader loader(ds, o);
      for (int epoch = 0; epoch < 2; ++epoch) {
        auto batches = epoch_targets(loader);
        CHECK(batches.size() == 15);
        if (runs.size() < 2) runs.push_back(batches);
        else CHECK(batches == runs[static_cast<size_t>(epoch)]);
      }
    }
  }
  CHECK(runs[0] != runs[1]);
}

TEST_CASE("DataLoader with a custom collate and a custom sampler") {
  auto ds = counting_dataset(10);
  auto o = opts(3, false, 2);
  std::atomic<int> calls{0};
  o.collate = [&calls](std::vector<Example> examples) {
    ++calls;
    Example e = stack_examples(examples);
    e.target = e.target * Scalar(10);
    return e;
  };
  o.sampler = std::make_shared<EvenOddSampler>(10);
  DataLoader loader(ds, o);
  CHECK(loader.size() == 2);  // 5 indices per epoch in batches of 3
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int64_t> seen;
    for (Example& b : loader) {
      auto t = b.target.to_vector<int64_t>();
      seen.insert(seen.end(), t.begin(), t.end());
    }
    std::vector<int64_t> expected;
    for (int64_t i = epoch; i < 10; i += 2) expected.push_back(10 * i);
    CHECK(seen == expected);
  }
  CHECK(calls == 4);

  o.shuffle = true;
  CHECK_ERROR_HAS(DataLoader(ds, o), "mutually exclusive");
  o.shuffle = false;
  o.batch_size = 0;
  CHECK_ERROR_HAS(DataLoader(ds, o), "batch_size");
}

TEST_CASE("DataLoader rethrows a failing batch in the consumer, naming the batch") {
  auto ds = std::make_shared<FlakyDataset>(20, 13);
  for (int workers : {0, 1, 3}) {
    CAPTURE(workers);
    DataLoader loader(ds, opts(4, false, workers));
    std::vector<int64_t> got;
    std::string msg = test::error_of([&] {
      for (Example& b : loader) got.push_back(b.target.to_vector<int64_t>()[0]);
    });
    CHECK(got == std::vector<int64_t>{0, 4, 8});  // batches before the bad one arrive intact
    for (std::string part : {"batch 3 of epoch 0", "12, 13", "example 13 is unreadable"})
      CHECK_MESSAGE(msg.find(part) != std::string::npos, msg);
    if (workers) CHECK_MESSAGE(msg.find("worker " + std::to_string(3 % workers)) != std::string::npos, msg);
    // The loader stays usable: the next epoch runs (and fails) the same way.
    CHECK(test::error_of([&] {
      for (Example& b : loader) (void)b;
    }).find("batch 3 of epoch 1") != std::string::npos);
  }
}

TEST_CASE("Leaving an epoch early stops the workers without hanging") {
  // A slow dataset: if shutdown waited for the whole epoch this would take minutes.
  class SlowDataset : public Dataset {
   public:
    Example get(int64_t i) const override {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      return {full({2}, static_cast<double>(i)), scalar_tensor(i, kInt64)};
    }
    int64_t size() const override { return 5000; }
  };
  auto ds = std::make_shared<SlowDataset>();
  auto start = std::chrono::steady_clock::now();
  for (int workers : {0, 1, 4}) {
    auto o = opts(2, true, workers);
    o.prefetch = 1;
    DataLoader loader(ds, o);
    int n = 0;
    for (Example& b : loader) {
      (void)b;
      if (++n == 3) break;
    }
    CHECK(n == 3);
    // Start another epoch and leave it immediately; then destroy the loader mid-epoch.
    auto it = loader.begin();
    CHECK(it != loader.end());
    CHECK(it.batch_index() == 0);
  }
  {
    // The loader goes away while an iterator of its epoch is still alive.
    std::unique_ptr<DataLoader> loader = std::make_unique<DataLoader>(ds, opts(2, false, 3));
    auto it = loader->begin();
    loader.reset();
    ++it;
    CHECK(it->target.to_vector<int64_t>() == std::vector<int64_t>{2, 3});
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 30.0);
}

TEST_CASE("DataLoader resumed mid-epoch yields exactly the rest of that epoch, then whole epochs") {
  auto ds = counting_dataset(23);
  for (int workers : {0, 2}) {
    CAPTURE(workers);
    DataLoaderOptions o{.batch_size = 4, .shuffle = true, .num_workers = workers, .seed = 11};
    DataLoader whole(ds, o);
    whole.set_epoch(1);
    auto e1 = epoch_targets(whole), e2 = epoch_targets(whole);
    REQUIRE(e1.size() == 6);

    DataLoader resumed(ds, o);
    resumed.set_epoch(1);
    resumed.set_start_batch(4);
    CHECK(resumed.start_batch() == 4);
    std::vector<int64_t> seen_index;
    std::vector<std::vector<int64_t>> rest;
    for (auto it = resumed.begin(); it != resumed.end(); ++it) {
      seen_index.push_back(it.batch_index());
      rest.push_back(it->target.to_vector<int64_t>());
    }
    CHECK(seen_index == std::vector<int64_t>{4, 5});
    CHECK(rest == std::vector<std::vector<int64_t>>(e1.begin() + 4, e1.end()));
    CHECK(resumed.start_batch() == 0);
    CHECK(epoch_targets(resumed) == e2);  // the next epoch is whole again

    resumed.set_start_batch(6);  // a checkpoint taken after the epoch's last step
    CHECK(epoch_targets(resumed).empty());
  }
  DataLoader loader(ds, {.batch_size = 4});
  CHECK(test::contains(test::error_of([&] { loader.set_start_batch(7); }), "start batch 7"));
  CHECK(test::contains(test::error_of([&] { loader.set_start_batch(-1); }), "start batch -1"));
}
