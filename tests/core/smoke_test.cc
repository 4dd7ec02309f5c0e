#include "core/parallel.h"
#include "tests/testing/compare.h"

using namespace kiln;

TEST_CASE("full and zeros fill every element") {
  Tensor t = full({2, 3}, 2.5);
  CHECK(t.sizes() == Shape{2, 3});
  CHECK(t.dtype() == kFloat32);
  for (float v : t.to_vector<float>()) CHECK(v == 2.5f);
  Tensor z = zeros({4}, kInt64);
  for (int64_t v : z.to_vector<int64_t>()) CHECK(v == 0);
}

TEST_CASE("arange gives integers for integer arguments") {
  Tensor a = arange(5);
  CHECK(a.dtype() == kInt64);
  CHECK(a.to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4});
}

TEST_CASE("arange and linspace refuse bool in the op, before any backend's kernel runs") {
  CHECK_THROWS_WITH_AS(arange(0, 3, 1, TensorOptions(kBool)), doctest::Contains("arange: dtype bool is not supported"),
                       kiln::Error);
  CHECK_THROWS_WITH_AS(linspace(0, 1, 3, TensorOptions(kBool)),
                       doctest::Contains("linspace: dtype bool is not supported"), kiln::Error);
}

TEST_CASE("no kernel for a device names the op and device") {
  CHECK_THROWS_WITH(zeros({2}, Device("cuda:0")), doctest::Contains("cuda"));
}

TEST_CASE("the CPU allocator reuses freed large blocks and can be emptied") {
  empty_cpu_cache();
  void* first = nullptr;
  {
    Tensor a = empty({1 << 16});  // 256 KiB
    first = a.data_ptr();
  }
  CHECK(cpu_cached_bytes() >= (size_t{1} << 18));
  Tensor b = empty({1 << 16});
  CHECK(b.data_ptr() == first);
  empty_cpu_cache();
  CHECK(cpu_cached_bytes() == 0);
}

TEST_CASE("parallel_for covers the range once, in chunks, and rethrows errors") {
  std::vector<int> hits(1 << 20, 0);
  parallel_for(0, static_cast<int64_t>(hits.size()), 1024, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) ++hits[i];
  });
  for (int h : hits) REQUIRE(h == 1);
  CHECK_THROWS_WITH(parallel_for(0, 1 << 20, 1024, [](int64_t b, int64_t) {
                      if (b > 0) throw Error("chunk failed");
                    }),
                    doctest::Contains("chunk failed"));
}
