// sort, argsort, topk, cumsum and cumprod against hand-computed values (PyTorch's semantics:
// stable order, NaN as the largest value); gradients are checked by the op-parity table.
#include <doctest/doctest.h>

#include <cmath>

#include "core/ops.h"

using namespace kiln;
using V = std::vector<double>;
using I = std::vector<int64_t>;

TEST_CASE("sort and argsort: stable, descending, any dim, NaN last ascending and first descending") {
  Tensor x = tensor({3.0, 1.0, 2.0, 1.0}, kFloat64);
  auto [v, i] = sort(x);
  CHECK(v.to_vector<double>() == V{1, 1, 2, 3});
  CHECK(i.to_vector<int64_t>() == I{1, 3, 2, 0});  // ties keep their order
  CHECK(argsort(x, 0, true).to_vector<int64_t>() == I{0, 2, 1, 3});
  Tensor m = tensor(std::vector<double>{5, 1, 4, 2, 6, 0}, {2, 3});
  CHECK(std::get<0>(sort(m, 0)).to_vector<double>() == V{2, 1, 0, 5, 6, 4});
  CHECK(m.argsort(1).to_vector<int64_t>() == I{1, 2, 0, 2, 0, 1});
  Tensor n = tensor({1.0, NAN, -1.0}, kFloat32);
  auto asc = std::get<0>(sort(n)).to_vector<float>();
  CHECK(asc[0] == -1.0f);
  CHECK(std::isnan(asc[2]));
  CHECK(argsort(n, 0, true).to_vector<int64_t>() == I{1, 0, 2});
  CHECK(argsort(tensor(std::vector<int64_t>{3, -2, 7})).to_vector<int64_t>() == I{1, 0, 2});
  CHECK(std::get<0>(sort(randn({4, 0}), 1)).sizes() == Shape{4, 0});
}

TEST_CASE("topk: largest or smallest k along a dim, with their indices") {
  Tensor x = tensor(std::vector<double>{1, 9, 3, 7, 5, 2}, {2, 3});
  auto [v, i] = topk(x, 2);
  CHECK(v.to_vector<double>() == V{9, 3, 7, 5});
  CHECK(i.to_vector<int64_t>() == I{1, 2, 0, 1});
  CHECK(std::get<0>(topk(x, 1, 0, false)).to_vector<double>() == V{1, 5, 2});
  CHECK_THROWS_WITH(topk(x, 4), doctest::Contains("topk: k (4) is out of range for dim 1 of size 3"));
}

TEST_CASE("cumsum and cumprod, over both dims, with zeros and integers") {
  Tensor x = tensor(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(cumsum(x, 1).to_vector<double>() == V{1, 3, 6, 4, 9, 15});
  CHECK(cumsum(x, 0).to_vector<double>() == V{1, 2, 3, 5, 7, 9});
  CHECK(x.cumprod(-1).to_vector<double>() == V{1, 2, 6, 4, 20, 120});
  CHECK(cumprod(tensor({2.0, 0.0, 3.0}), 0).to_vector<float>() == std::vector<float>{2, 0, 0});
  CHECK(cumsum(arange(1, 12), 0).to_vector<int64_t>().back() == 66);
  CHECK(cumsum(arange(1, 12), 0).dtype() == kInt64);
  CHECK_THROWS_WITH(cumsum(ones({2}, kBool), 0), doctest::Contains("cumsum: bool input"));
}
