#include "tests/core/test_util.h"

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

TEST_CASE("no kernel for a device names the op and device") {
  CHECK_THROWS_WITH(zeros({2}, Device("cuda:0")), doctest::Contains("cuda"));
}
