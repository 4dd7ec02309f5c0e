// DistributedSampler: disjoint equal shards that cover the epoch, reshuffled per epoch from
// (seed, epoch) identically on every rank.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "data/sampler.h"

namespace kiln::data {
namespace {

std::vector<std::vector<int64_t>> shards(int64_t n, int world, bool shuffle, bool drop_last, int64_t epoch) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < world; ++r) out.push_back(DistributedSampler(n, r, world, shuffle, 42, drop_last).indices(epoch));
  return out;
}

TEST_CASE("shards are disjoint, equal and cover the dataset (padding by wrapping)") {
  for (int64_t n : {0, 1, 2, 10, 11, 1001})
    for (int world : {1, 2, 3, 4}) {
      CAPTURE(n);
      CAPTURE(world);
      auto s = shards(n, world, true, false, 0);
      int64_t per = (n + world - 1) / world;
      std::multiset<int64_t> all;
      for (auto& sh : s) {
        CHECK(static_cast<int64_t>(sh.size()) == per);
        all.insert(sh.begin(), sh.end());
      }
      for (int64_t i = 0; i < n; ++i) CHECK(all.count(i) >= 1);
      CHECK(static_cast<int64_t>(all.size()) == per * world);
      if (n >= world)  // at most one repeat of each index
        for (int64_t i = 0; i < n; ++i) CHECK(all.count(i) <= 2);
      if (n % world == 0 && n > 0) CHECK(std::set<int64_t>(all.begin(), all.end()).size() == all.size());
    }
}

TEST_CASE("drop_last gives floor(n / world) distinct indices per rank") {
  auto s = shards(11, 3, true, true, 5);
  std::set<int64_t> all;
  for (auto& sh : s) {
    CHECK(sh.size() == 3);
    all.insert(sh.begin(), sh.end());
  }
  CHECK(all.size() == 9);
}

TEST_CASE("every epoch reshuffles, the same way on every rank and every run") {
  auto e0 = shards(100, 2, true, false, 0), e1 = shards(100, 2, true, false, 1);
  CHECK(e0 != e1);
  CHECK(e0 == shards(100, 2, true, false, 0));
  // Rank r's shard is the strided slice of the global permutation of that epoch.
  auto perm = random_permutation(100, 42, 1);
  for (size_t i = 0; i < e1[1].size(); ++i) CHECK(e1[1][i] == perm[2 * i + 1]);
  // Without shuffling: 0, W, 2W, ... for rank 0.
  auto seq = shards(7, 3, false, false, 3);
  CHECK(seq[0] == std::vector<int64_t>{0, 3, 6});
  CHECK(seq[1] == std::vector<int64_t>{1, 4, 0});
}

TEST_CASE("bad ranks and world sizes are refused naming the value") {
  CHECK_THROWS_WITH_AS(DistributedSampler(10, 2, 2), doctest::Contains("rank 2 is out of range for world_size 2"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(DistributedSampler(10, 0, 0), doctest::Contains("world_size must be at least 1, got 0"),
                       kiln::Error);
}

}  // namespace
}  // namespace kiln::data
