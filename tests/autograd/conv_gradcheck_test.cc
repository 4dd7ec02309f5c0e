// Gradients of conv2d (w.r.t. input, weight and bias), max/avg pooling and adaptive average
// pooling against f64 central differences, over stride, padding, dilation, groups and 1x1.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "core/conv.h"
#include "tests/autograd/grad_test_util.h"

using namespace kiln;
using autograd::gradcheck;

namespace {

using test::Inputs;
using test::leaf;

struct ConvConfig {
  const char* name;
  Shape x, w;
  IntList stride, padding, dilation;
  int64_t groups;
};

const std::vector<ConvConfig> kConfigs = {
    {"plain 3x3", {2, 2, 5, 5}, {3, 2, 3, 3}, {1}, {0}, {1}, 1},
    {"stride 2", {2, 2, 6, 5}, {3, 2, 3, 3}, {2}, {0}, {1}, 1},
    {"padding 1", {1, 2, 4, 5}, {2, 2, 3, 3}, {1}, {1}, {1}, 1},
    {"dilation 2", {1, 2, 6, 6}, {2, 2, 3, 3}, {1}, {1}, {2}, 1},
    {"groups 2", {2, 4, 5, 4}, {4, 2, 3, 2}, {1}, {1, 0}, {1}, 2},
    {"1x1", {2, 3, 4, 3}, {2, 3, 1, 1}, {1}, {0}, {1}, 1},
    {"1x1 strided", {1, 3, 5, 4}, {2, 3, 1, 1}, {2}, {0}, {1}, 1},
    {"asymmetric", {1, 2, 7, 6}, {2, 2, 3, 2}, {2, 1}, {1, 2}, {1, 2}, 1},
};

}  // namespace

TEST_CASE("conv2d gradients w.r.t. input, weight and bias") {
  manual_seed(41);
  for (const ConvConfig& c : kConfigs) {
    CAPTURE(std::string(c.name));
    Tensor x = leaf(c.x), w = leaf(c.w), b = leaf({c.w[0]});
    auto with_bias = [&c](Inputs v) { return conv2d(v[0], v[1], v[2], c.stride, c.padding, c.dilation, c.groups); };
    auto no_bias = [&c](Inputs v) { return conv2d(v[0], v[1], {}, c.stride, c.padding, c.dilation, c.groups); };
    CHECK_GRAD(with_bias, x, w, b);
    CHECK_GRAD(no_bias, x, w);
    // Only some inputs requiring grad: the backward computes just those.
    CHECK_GRAD(no_bias, x, w.detach());
    CHECK_GRAD(no_bias, x.detach(), w);
    CHECK_GRAD(with_bias, x.detach(), w.detach(), b);
  }
}

TEST_CASE("conv2d gradient flows through a composite and a non-contiguous input") {
  manual_seed(42);
  Tensor x = leaf({2, 2, 5, 6}), w = leaf({3, 2, 3, 3}), b = leaf({3});
  CHECK_GRAD([](Inputs v) { return relu(conv2d(v[0].transpose(2, 3), v[1], v[2], {1}, {1})).sum({1}); }, x, w, b);
}

TEST_CASE("max_pool2d and avg_pool2d gradients") {
  manual_seed(43);
  Tensor x = leaf({2, 2, 7, 6});
  CHECK_GRAD([](Inputs v) { return max_pool2d(v[0], {2}); }, x);
  CHECK_GRAD([](Inputs v) { return max_pool2d(v[0], {3}, {2}, {1}); }, x);
  CHECK_GRAD([](Inputs v) { return max_pool2d(v[0], {2, 3}, {2, 1}, {1, 0}, {1, 1}, true); }, x);
  CHECK_GRAD([](Inputs v) { return avg_pool2d(v[0], {2}); }, x);
  CHECK_GRAD([](Inputs v) { return avg_pool2d(v[0], {3}, {2}, {1}); }, x);
  CHECK_GRAD([](Inputs v) { return avg_pool2d(v[0], {3}, {2}, {1}, true, false); }, x);
  CHECK_GRAD([](Inputs v) { return avg_pool2d(v[0], {2, 3}, {1, 2}, {1, 1}, true, true); }, x);
}

TEST_CASE("adaptive_avg_pool2d gradients") {
  manual_seed(44);
  Tensor x = leaf({2, 2, 7, 6});
  CHECK_GRAD([](Inputs v) { return adaptive_avg_pool2d(v[0], {1}); }, x);
  CHECK_GRAD([](Inputs v) { return adaptive_avg_pool2d(v[0], {7, 3}); }, x);   // avg_pool2d path
  CHECK_GRAD([](Inputs v) { return adaptive_avg_pool2d(v[0], {3, 4}); }, x);   // uneven windows
}

TEST_CASE("gradients flow through a small CNN of conv, relu, max pool and adaptive pool") {
  manual_seed(45);
  Tensor x = leaf({2, 1, 8, 8}), w1 = leaf({3, 1, 3, 3}), b1 = leaf({3}), w2 = leaf({4, 3, 3, 3});
  auto net = [](Inputs v) {
    Tensor h = max_pool2d(relu(conv2d(v[0], v[1], v[2], {1}, {1})), {2});
    return adaptive_avg_pool2d(conv2d(h, v[3], {}, {1}, {1}), {1}).flatten(1);
  };
  CHECK_GRAD(net, x, w1, b1, w2);
}
