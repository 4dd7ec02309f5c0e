// Values of the rearranging, padding, norm and product ops against hand-computed results
// (PyTorch's semantics); their gradients are checked by the op-parity table.
#include <doctest/doctest.h>

#include <cmath>

#include "core/conv.h"
#include "core/ops.h"
#include "tests/testing/compare.h"

using namespace kiln;

namespace {
Tensor m34() { return arange(12, kFloat64).view({3, 4}); }
std::vector<double> v(const Tensor& t) { return t.to_vector<double>(); }
using V = std::vector<double>;
}  // namespace

TEST_CASE("flip, roll, repeat and tile") {
  CHECK(v(m34().flip({0})) == V{8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3});
  CHECK(v(m34().flip({-1, 0})) == V{11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  CHECK_THROWS_WITH(m34().flip({1, -1}), doctest::Contains("flip: dim 1 appears more than once"));
  CHECK(v(arange(5, kFloat64).roll({2})) == V{3, 4, 0, 1, 2});
  CHECK(v(arange(5, kFloat64).roll({-7})) == V{2, 3, 4, 0, 1});
  CHECK(v(m34().roll({1, 1}, {0, 1})) == V{11, 8, 9, 10, 3, 0, 1, 2, 7, 4, 5, 6});
  CHECK(v(m34().roll({5})) == V{7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5, 6});
  Tensor r = tensor({1.0, 2.0}, kFloat64).repeat({2, 2});
  CHECK(r.sizes() == Shape{2, 4});
  CHECK(v(r) == V{1, 2, 1, 2, 1, 2, 1, 2});
  CHECK(tensor({1.0, 2.0}).tile({3}).sizes() == Shape{6});
  CHECK(m34().tile({2}).sizes() == Shape{3, 8});
  CHECK_THROWS_WITH(m34().repeat({2}), doctest::Contains("repeat: 1 repeats for a tensor with 2 dims"));
}

TEST_CASE("tril and triu with diagonal offsets, over batches") {
  Tensor o = ones({2, 3, 3}, kFloat64);
  CHECK(v(o.tril()[1]) == V{1, 0, 0, 1, 1, 0, 1, 1, 1});
  CHECK(v(o.tril(-1)[0]) == V{0, 0, 0, 1, 0, 0, 1, 1, 0});
  CHECK(v(o.triu(1)[0]) == V{0, 1, 1, 0, 0, 1, 0, 0, 0});
  CHECK(v(ones({2, 3}).triu()) == V{1, 1, 1, 0, 1, 1});
  CHECK_THROWS_WITH(ones({3}).tril(), doctest::Contains("tril: expected a tensor with at least 2 dims"));
}

TEST_CASE("clamp with tensor bounds: broadcast, max wins when min > max, NaN stays") {
  Tensor x = tensor({-2.0, 0.5, 3.0, NAN}, kFloat64);
  Tensor y = clamp(x, tensor({-1.0}, kFloat64), tensor({1.0, 1.0, 2.0, 1.0}, kFloat64));
  auto r = v(y);
  CHECK(r[0] == -1);
  CHECK(r[1] == 0.5);
  CHECK(r[2] == 2);
  CHECK(std::isnan(r[3]));
  CHECK(v(clamp(tensor({0.0}, kFloat64), tensor({3.0}, kFloat64), tensor({1.0}, kFloat64))) == V{1});
  CHECK(v(clamp(x.narrow(0, 0, 3), Tensor(), tensor({0.0}, kFloat64))) == V{-2, 0, 0});
}

TEST_CASE("pad: constant (with crop), reflect, replicate, circular") {
  Tensor x = tensor({1.0, 2.0, 3.0}, kFloat64);
  CHECK(v(pad(x, {2, 1}, PadMode::constant, 9)) == V{9, 9, 1, 2, 3, 9});
  CHECK(v(pad(x, {-1, 1})) == V{2, 3, 0});
  CHECK(v(pad(x.view({1, 3}), {2, 2}, PadMode::reflect)) == V{3, 2, 1, 2, 3, 2, 1});
  CHECK(v(pad(x.view({1, 3}), {2, 1}, PadMode::replicate)) == V{1, 1, 1, 2, 3, 3});
  CHECK(v(pad(x.view({1, 3}), {1, 2}, PadMode::circular)) == V{3, 1, 2, 3, 1, 2});
  Tensor y = pad(m34(), {0, 0, 1, 0});  // a row on top
  CHECK(y.sizes() == Shape{4, 4});
  CHECK(v(y[0]) == V{0, 0, 0, 0});
  CHECK_THROWS_WITH(pad(x.view({1, 3}), {3, 0}, PadMode::reflect), doctest::Contains("must be smaller than"));
  CHECK_THROWS_WITH(pad(x, {1, 1, 1}), doctest::Contains("pad: 3 pad values"));
}

TEST_CASE("vector norms") {
  Tensor x = tensor({3.0, -4.0, 0.0}, kFloat64);
  CHECK(linalg::vector_norm(x).item<double>() == 5.0);
  CHECK(linalg::vector_norm(x, 1).item<double>() == 7.0);
  CHECK(linalg::vector_norm(x, INFINITY).item<double>() == 4.0);
  CHECK(linalg::vector_norm(x, -INFINITY).item<double>() == 0.0);
  CHECK(linalg::vector_norm(x, 0).item<double>() == 2.0);
  CHECK(linalg::vector_norm(x, 3).item<double>() == doctest::Approx(std::cbrt(27.0 + 64.0)));
  CHECK(v(m34().norm(2, {1})) == V{std::sqrt(14.0), std::sqrt(126.0), std::sqrt(366.0)});
}

TEST_CASE("addmm and baddbmm: beta, alpha, broadcast input, and beta = 0 ignores NaN") {
  Tensor a = m34(), b = ones({4, 2}, kFloat64);
  Tensor in = tensor({1.0, 2.0}, kFloat64);
  CHECK(v(addmm(in, a, b, 2, 0.5)) == V{5, 7, 13, 15, 21, 23});
  CHECK(v(addmm(full({2}, NAN, kFloat64), a, b, 0)) == V{6, 6, 22, 22, 38, 38});
  Tensor bb = baddbmm(zeros({1, 3, 2}, kFloat64), a.unsqueeze(0), b.unsqueeze(0), 1, -1);
  CHECK(v(bb) == V{-6, -6, -22, -22, -38, -38});
  CHECK_THROWS_WITH(addmm(ones({3}), a, b), doctest::Contains("addmm: shapes [3] and [3, 2] cannot be broadcast"));
  CHECK_THROWS_WITH(addmm(ones({2, 3, 2}), a, b), doctest::Contains("addmm: input of shape [2, 3, 2]"));
}

TEST_CASE("einsum against matmul, transpose, sums and an outer product; bad equations say why") {
  Tensor a = randn({2, 3, 4}, kFloat64), b = randn({2, 4, 5}, kFloat64);
  CHECK_ALLCLOSE(einsum("bij,bjk->bik", {a, b}), matmul(a, b), 1e-12, 1e-12);
  CHECK_ALLCLOSE(einsum("bij->bji", {a}), a.transpose(1, 2), 0, 0);
  CHECK_ALLCLOSE(einsum("bij->", {a}), a.sum(), 1e-12, 1e-12);
  // Implicit output: the letters seen once, sorted ("ik"); b occurs twice, so it is summed.
  CHECK_ALLCLOSE(einsum("bij,bjk", {a, b}), matmul(a, b).sum({0}), 1e-12, 1e-12);
  Tensor u = tensor({1.0, 2.0}, kFloat64), w = tensor({3.0, 4.0, 5.0}, kFloat64);
  CHECK(v(einsum("i,j->ij", {u, w})) == V{3, 4, 5, 6, 8, 10});
  CHECK(einsum("i,i->", {u, u}).item<double>() == 5.0);
  CHECK_THROWS_WITH(einsum("ii->i", {ones({2, 2})}), doctest::Contains("diagonals are not supported"));
  CHECK_THROWS_WITH(einsum("ij,jk->ik", {ones({2, 3}), ones({4, 2})}), doctest::Contains("subscript 'j' has size 3"));
  CHECK_THROWS_WITH(einsum("ij->ik", {ones({2, 3})}), doctest::Contains("output subscript 'k'"));
  CHECK_THROWS_WITH(einsum("ij,jk->ik", {ones({2, 3})}), doctest::Contains("names 2 operands but 1"));
}

TEST_CASE("conv2d padding \"same\" keeps the size (even kernels pad bottom/right), \"valid\" pads nothing") {
  Tensor x = randn({1, 1, 5, 6}, kFloat64), w = randn({2, 1, 2, 3}, kFloat64);
  Tensor same = conv2d(x, w, {}, {1, 1}, ConvPadding::same);
  CHECK(same.sizes() == Shape{1, 2, 5, 6});
  // Total padding (1, 2): top 0 / bottom 1, left 1 / right 1, as PyTorch.
  CHECK_ALLCLOSE(same, conv2d(pad(x, {1, 1, 0, 1}), w), 1e-12, 1e-12);
  CHECK(conv2d(x, w, {}, {1, 1}, ConvPadding::valid).sizes() == Shape{1, 2, 4, 4});
  CHECK_THROWS_WITH(conv2d(x, w, {}, {2, 2}, ConvPadding::same), doctest::Contains("needs stride 1"));
  CHECK_THROWS_WITH(parse_conv_padding("full"), doctest::Contains("\"same\", \"valid\""));
  CHECK_THROWS_WITH(conv2d(x, w, {}, {1}, {0}, {1}, 3), doctest::Contains("groups"));  // braces still mean sizes
}
