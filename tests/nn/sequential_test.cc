// Sequential runs a ReLU followed by a MaxPool2d as max pooling, then ReLU: the values and
// gradients must be those of the layers run one by one, in their order, on windows that are
// all negative, tied at zero or at a positive maximum, hold NaN or overlap.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/generator.h"
#include "nn/nn.h"

using namespace kiln;

namespace {

/// The layers of `seq` one by one, in order (what Sequential meant before the swap).
Tensor in_order(const nn::Sequential& seq, const Tensor& x) {
  Tensor h = x;
  for (size_t i = 0; i < seq.size(); ++i) h = (*seq[i])(h);
  return h;
}

/// Equal element by element, NaN equal to NaN (and, as ==, a zero to a zero of either sign).
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes()) return false;
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i)
    if (!(va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i])))) return false;
  return true;
}

/// The input's and every parameter's gradient of sum(seq(x) * weights), by `run`.
template <class Run> std::vector<Tensor> grads(nn::Sequential& seq, const Tensor& x0, const Tensor& weights, Run run) {
  seq.zero_grad();
  Tensor x = x0.detach().set_requires_grad(true);
  (run(x) * weights).sum().backward();
  std::vector<Tensor> g{x.grad().clone()};
  for (Tensor p : seq.parameters()) g.push_back(p.grad().clone());
  return g;
}

/// seq(x) against the layers in order: the same values, bit-identical gradients.
void check_like_in_order(nn::Sequential& seq, const Tensor& x) {
  Tensor y = seq(x), ref = in_order(seq, x);
  CHECK(same_values(y, ref));
  const Tensor weights = randn(ref.sizes(), x.dtype());
  auto got = grads(seq, x, weights, [&](const Tensor& v) { return seq(v); });
  auto want = grads(seq, x, weights, [&](const Tensor& v) { return in_order(seq, v); });
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].to_vector<double>() == want[i].to_vector<double>());
  }
}

struct MyReLU : nn::ReLU {};

}  // namespace

TEST_CASE("Sequential swaps exactly a ReLU followed by a MaxPool2d") {
  nn::Sequential cnn{nn::Conv2d(1, 2, 3), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(), nn::ReLU()};
  CHECK_FALSE(cnn.swapped_relu_pool(0));
  CHECK(cnn.swapped_relu_pool(1));
  CHECK_FALSE(cnn.swapped_relu_pool(2));
  CHECK_FALSE(cnn.swapped_relu_pool(4));  // the last layer
  nn::Sequential other{nn::MaxPool2d(2), nn::ReLU(), MyReLU(), nn::MaxPool2d(2), nn::ReLU(), nn::AvgPool2d(2)};
  for (size_t i = 0; i < other.size(); ++i) CHECK_FALSE(other.swapped_relu_pool(i));
}

TEST_CASE("ReLU then MaxPool2d: windows all negative, tied, with NaN, as the layers in order") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // One 4 x 4 plane, four 2 x 2 windows: all negative; tied at zero with negatives; a positive
  // maximum tied twice; NaN beside a larger value.
  Tensor x = tensor(std::vector<double>{-3, -1, 0, -2,   //
                                        -2, -5, 0, 0,    //
                                        2, 7, nan, 9,    //
                                        7, 1, 1, -4},
                    {1, 1, 4, 4});
  for (DType dt : {kFloat64, kFloat32}) {
    CAPTURE(dtype_name(dt));
    nn::Sequential seq{nn::ReLU(), nn::MaxPool2d(2)};
    REQUIRE(seq.swapped_relu_pool(0));
    check_like_in_order(seq, x.to(dt));
  }
}

TEST_CASE("a CNN's ReLU and pooling swapped: the same outputs and gradients, overlapping and padded windows too") {
  manual_seed(21);
  for (DType dt : {kFloat64, kFloat32}) {
    CAPTURE(dtype_name(dt));
    nn::Sequential cnn{nn::Conv2d(2, 4, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(2),
                       nn::Conv2d(4, 3, 3, {.padding = 1}), nn::ReLU(), nn::MaxPool2d(3, 1, 1, /*ceil_mode=*/true),
                       nn::Flatten(), nn::Linear(3 * 5 * 5, 6)};
    cnn.to(dt);
    REQUIRE(cnn.swapped_relu_pool(1));
    REQUIRE(cnn.swapped_relu_pool(4));
    check_like_in_order(cnn, randn({3, 2, 10, 10}, dt));
  }
}
