// Every differentiable op's gradient against f64 central differences (eps 1e-6, atol 1e-5,
// rtol 1e-3), on random inputs, with broadcasting and non-contiguous views.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "autograd/autograd.h"
#include "core/op_table.h"
#include "tests/autograd/grad_test_util.h"

using namespace kiln;
using autograd::gradcheck;

namespace {

using test::Inputs;
using test::leaf;

Tensor positive(const Shape& shape) { return leaf(shape, 0.5, 2.0); }

}  // namespace

TEST_CASE("unary ops") {
  manual_seed(1);
  Tensor x = leaf({3, 4}), p = positive({3, 4});
  CHECK_GRAD([](Inputs v) { return -v[0]; }, x);
  CHECK_GRAD([](Inputs v) { return abs(v[0]); }, x);
  CHECK_GRAD([](Inputs v) { return exp(v[0]); }, x);
  CHECK_GRAD([](Inputs v) { return log(v[0]); }, p);
  CHECK_GRAD([](Inputs v) { return log1p(v[0]); }, p);
  CHECK_GRAD([](Inputs v) { return expm1(v[0]); }, x);
  CHECK_GRAD([](Inputs v) { return sqrt(v[0]); }, p);
  CHECK_GRAD([](Inputs v) { return rsqrt(v[0]); }, p);
  CHECK_GRAD([](Inputs v) { return sin(v[0]); }, x);
  CHECK_GRAD([](Inputs v) { return cos(v[0]); }, x);
  CHECK_GRAD([](Inputs v) { return tanh(v[0]); }, x);
  CHECK_GRAD([](Inputs v) { return sigmoid(v[0]); }, x);
  CHECK_GRAD([](Inputs v) { return relu(v[0]); }, x);
  CHECK_GRAD([](Inputs v) { return gelu(v[0]); }, x);
  CHECK_GRAD([](Inputs v) { return silu(v[0]); }, x);
  CHECK_GRAD([](Inputs v) { return square(v[0]); }, x);
  CHECK_GRAD([](Inputs v) { return reciprocal(v[0]); }, p);
  CHECK_GRAD([](Inputs v) { return pow(v[0], 3.0); }, x);
  CHECK_GRAD([](Inputs v) { return pow(v[0], 0.5); }, p);
  CHECK_GRAD([](Inputs v) { return clamp(v[0], -0.5, 0.5); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].t().exp(); }, x);  // through a non-contiguous view
}

TEST_CASE("activations of the registry, each parameter away from its default") {
  manual_seed(11);
  Tensor x = leaf({3, 4}, -3.0, 3.0);
  CHECK_GRAD([](Inputs v) { return softplus(v[0]); }, x);
  CHECK_GRAD([](Inputs v) { return softplus(v[0], 2.0, 1.5); }, x);  // both branches of the threshold
  CHECK_GRAD([](Inputs v) { return leaky_relu(v[0], 0.2); }, x);
  CHECK_GRAD([](Inputs v) { return elu(v[0], 1.7); }, x);
  CHECK_GRAD([](Inputs v) { return hardtanh(v[0], -1.5, 2.0); }, x);
  CHECK_GRAD([](Inputs v) { return hardswish(v[0]); }, x);
  CHECK_GRAD([](Inputs v) { return gelu(v[0], "tanh"); }, x);
  CHECK_GRAD([](Inputs v) { return gelu(v[0].t(), "tanh"); }, x);  // non-contiguous
}

TEST_CASE("gradients exactly at the kinks follow PyTorch 2.x") {
  // Measured with PyPI torch 2.15: clamp with scalar bounds: 0 at x == min and x == max, 0 outside
  // and for NaN; hardtanh: 0 at both bounds; relu: 0 at 0; leaky_relu: the slope at 0; elu: alpha
  // at 0; hardswish: 0 at and below -3, (x / 3 + 0.5) strictly inside, g at and above 3.
  auto grad_of = [](const std::function<Tensor(const Tensor&)>& f, std::vector<double> xs) {
    Tensor x = tensor(xs, {static_cast<int64_t>(xs.size())}, kFloat64).requires_grad_(true);
    f(x).sum().backward();
    return x.grad().to_vector<double>();
  };
  const double nan = std::nan("");
  auto g = grad_of([](const Tensor& x) { return clamp(x, -1.0, 2.0); }, {-1.0, 2.0, -1.5, 2.5, 0.0, nan});
  CHECK(g == std::vector<double>{0, 0, 0, 0, 1, 0});
  CHECK(grad_of([](const Tensor& x) { return clamp(x, -1.0, std::nullopt); }, {-1.0, -2.0}) ==
        std::vector<double>{0, 0});
  CHECK(grad_of([](const Tensor& x) { return clamp(x, std::nullopt, 2.0); }, {2.0, 3.0}) == std::vector<double>{0, 0});
  CHECK(grad_of([](const Tensor& x) { return hardtanh(x, -1.0, 2.0); }, {-1.0, 2.0, 0.5}) ==
        std::vector<double>{0, 0, 1});
  CHECK(grad_of([](const Tensor& x) { return relu(x); }, {0.0}) == std::vector<double>{0});
  CHECK(grad_of([](const Tensor& x) { return leaky_relu(x, 0.1); }, {0.0})[0] == doctest::Approx(0.1));
  CHECK(grad_of([](const Tensor& x) { return elu(x, 1.5); }, {0.0})[0] == doctest::Approx(1.5));
  CHECK(grad_of([](const Tensor& x) { return hardswish(x); }, {-3.0, 3.0, -4.0, 4.0}) ==
        std::vector<double>{0, 1, 0, 1});
}

TEST_CASE("binary ops with broadcasting") {
  manual_seed(2);
  Tensor a = leaf({3, 4}), b = leaf({4}), c = leaf({3, 1}), p = positive({3, 4}), q = positive({4});
  CHECK_GRAD([](Inputs v) { return v[0] + v[1]; }, a, b);
  CHECK_GRAD([](Inputs v) { return add(v[0], v[1], 2.5); }, a, c);
  CHECK_GRAD([](Inputs v) { return v[0] - v[1]; }, a, c);
  CHECK_GRAD([](Inputs v) { return v[0] * v[1]; }, a, b);
  CHECK_GRAD([](Inputs v) { return v[0] / v[1]; }, a, q);
  CHECK_GRAD([](Inputs v) { return pow(v[0], v[1]); }, p, b);
  CHECK_GRAD([](Inputs v) { return maximum(v[0], v[1]); }, a, c);
  CHECK_GRAD([](Inputs v) { return minimum(v[0], v[1]); }, a, b);
  CHECK_GRAD([](Inputs v) { return v[0] * 3.0 + 1.0; }, a);
  CHECK_GRAD([](Inputs v) { return 2.0 / v[0]; }, p);
  CHECK_GRAD([](Inputs v) { return where(v[0] > 0.0, v[0], v[1]); }, a, b);
  CHECK_GRAD([](Inputs v) { return masked_fill(v[0], v[0] > 0.2, 0.0); }, a);
}

TEST_CASE("reductions") {
  manual_seed(3);
  Tensor x = leaf({2, 3, 4});
  CHECK_GRAD([](Inputs v) { return v[0].sum(); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].sum({1}); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].sum({0, 2}, true); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].mean({-1}); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].amax({1}); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].amin({2}, true); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].max(); }, x);
  CHECK_GRAD([](Inputs v) { return std::get<0>(max(v[0], 1)); }, x);
  CHECK_GRAD([](Inputs v) { return std::get<0>(min(v[0], 2, true)); }, x);
  CHECK_GRAD([](Inputs v) { return prod(v[0], {1}); }, positive({2, 3}));
  CHECK_GRAD([](Inputs v) { return v[0].var({1}); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].std({2}, 0); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].logsumexp({1}); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].softmax(1); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].log_softmax(-1); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].transpose(0, 2).softmax(0); }, x);
}

TEST_CASE("matmul in all its shapes") {
  manual_seed(4);
  CHECK_GRAD([](Inputs v) { return matmul(v[0], v[1]); }, leaf({3, 4}), leaf({4, 2}));
  CHECK_GRAD([](Inputs v) { return matmul(v[0], v[1]); }, leaf({4}), leaf({4}));
  CHECK_GRAD([](Inputs v) { return matmul(v[0], v[1]); }, leaf({4}), leaf({4, 3}));
  CHECK_GRAD([](Inputs v) { return matmul(v[0], v[1]); }, leaf({2, 3, 4}), leaf({4, 2}));
  CHECK_GRAD([](Inputs v) { return matmul(v[0], v[1]); }, leaf({2, 1, 3, 4}), leaf({3, 4, 2}));
  CHECK_GRAD([](Inputs v) { return bmm(v[0], v[1]); }, leaf({2, 3, 4}), leaf({2, 4, 5}));
  CHECK_GRAD([](Inputs v) { return mm(v[0].t(), v[1]); }, leaf({4, 3}), leaf({4, 2}));
  CHECK_GRAD([](Inputs v) { return op::linear(v[0], v[1], v[2]); }, leaf({5, 3}), leaf({4, 3}), leaf({4}));
  CHECK_GRAD([](Inputs v) { return op::linear(v[0], v[1], Tensor()); }, leaf({2, 5, 3}), leaf({4, 3}));
  CHECK_GRAD([](Inputs v) { return op::linear(v[0].t(), v[1], Tensor()); }, leaf({3, 5}), leaf({4, 3}));
}

TEST_CASE("views, joins and conversions") {
  manual_seed(5);
  Tensor x = leaf({2, 3, 4}), y = leaf({2, 2, 4});
  CHECK_GRAD([](Inputs v) { return v[0].reshape({6, 4}); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].view({-1}); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].transpose(0, 1).reshape({3, 8}); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].permute({2, 0, 1}); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].narrow(1, 1, 2); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].slice(2, 0, 4, 2); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].select(1, 2); }, x);
  CHECK_GRAD([](Inputs v) { return v[0][1]; }, x);
  CHECK_GRAD([](Inputs v) { return v[0].unsqueeze(1).expand({2, 5, 3, 4}); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].squeeze(1); }, leaf({3, 1, 2}));
  CHECK_GRAD([](Inputs v) { return v[0].flatten(1); }, x);
  CHECK_GRAD([](Inputs v) { return cat({v[0], v[1]}, 1); }, x, y);
  CHECK_GRAD([](Inputs v) { return stack({v[0], v[0] * 2.0}, 0); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].split(2, 2)[1]; }, x);
  CHECK_GRAD([](Inputs v) { return v[0].chunk(3, 1)[2] * 2.0; }, x);
  CHECK_GRAD([](Inputs v) { return v[0].clone(); }, x);
  CHECK_GRAD([](Inputs v) { return v[0].t().contiguous(); }, leaf({3, 4}));
  // Through f32 the finite difference needs a step f32 can resolve.
  auto r = gradcheck([](Inputs v) { return v[0].to(kFloat32).to(kFloat64); }, {x}, {.eps = 1e-2});
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("indexing") {
  manual_seed(6);
  Tensor x = leaf({4, 3});
  Tensor idx = tensor(std::vector<int64_t>{2, 0, 2});
  Tensor gidx = tensor(std::vector<int64_t>{0, 2, 1, 1, 0, 2, 2, 2, 0, 1, 1, 0}, {4, 3});
  CHECK_GRAD([&](Inputs v) { return v[0].index_select(0, idx); }, x);
  CHECK_GRAD([&](Inputs v) { return v[0].index_select(1, idx); }, x);
  CHECK_GRAD([&](Inputs v) { return v[0].gather(1, gidx); }, x);
  CHECK_GRAD([&](Inputs v) { return v[0].scatter_add(1, gidx, v[1]); }, x, leaf({4, 3}));
  Tensor small_idx = tensor(std::vector<int64_t>{1, 0, 2, 2}, {2, 2});
  CHECK_GRAD([&](Inputs v) { return v[0].scatter_add(0, small_idx, v[1]); }, leaf({3, 2}), leaf({3, 4}));
  // index_add with respect to both the destination and the source, repeated indices, both dims.
  CHECK_GRAD([&](Inputs v) { return index_add(v[0], 0, idx, v[1]); }, x, leaf({3, 3}));
  CHECK_GRAD([&](Inputs v) { return index_add(v[0], 1, idx, v[1]); }, x, leaf({4, 3}));
  // embedding: repeated rows (its padding row, deliberately not differentiated, is checked in
  // tests/nn/layers_test.cc), and a padding index that does not occur changes nothing.
  Tensor tokens = tensor(std::vector<int64_t>{1, 3, 3, 0, 2, 1}, {2, 3});
  CHECK_GRAD([&](Inputs v) { return embedding(v[0], tokens); }, x);
  CHECK_GRAD([&](Inputs v) { return embedding(v[0], tokens.clamp(0, 2), /*padding_idx=*/3); }, x);
}
