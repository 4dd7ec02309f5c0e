// Autocast: an MLP step and its gradients under a guard, ops outside the policy table, the cast
// cache (a weight is cast once per guard), nesting and refusals. Each policy entry's dtype class
// and precision are checked on its op database row (tests/testing/op_db_test.cc).
#include <doctest/doctest.h>

#include <string>

#include "amp/amp.h"
#include "autograd/gradcheck.h"
#include "core/conv.h"
#include "nn/functional.h"
#include "tests/file_util.h"
#include "tests/testing/compare.h"

using namespace kiln;
namespace F = kiln::nn::functional;
using test::contains;
using test::error_of;
using test::scaled_error;

namespace {

// Makes an op's inputs: values drawn in f64 (seeded, so two calls see the same ones), rounded to
// `dt`, then converted to `as` (a widened copy of low-precision values, for references).
struct Make {
  DType dt;
  DType as;
  Tensor operator()(const Shape& s, uint64_t seed, double lo = -1, double hi = 1) const {
    Generator g(seed);
    return (rand(s, kFloat64, &g) * (hi - lo) + lo).to(dt).to(as);
  }
  Tensor pos(const Shape& s, uint64_t seed) const { return (*this)(s, seed, 0.5, 2.0); }
};

/// Inputs of dtype t.
Make of(DType t) { return Make{t, t}; }

const DType kLows[] = {kBFloat16, kFloat16};

}  // namespace

TEST_CASE("ops outside the table follow their inputs") {
  amp::AutocastGuard g(kBFloat16);
  Tensor h = of(kBFloat16)({4, 5}, 1), f = of(kFloat32)({4, 5}, 2);
  CHECK(relu(h).dtype() == kBFloat16);
  CHECK(tanh(h).dtype() == kBFloat16);
  CHECK((h + h).dtype() == kBFloat16);
  CHECK((h * f).dtype() == kFloat32);  // ordinary promotion
  CHECK(relu(f).dtype() == kFloat32);
  CHECK(max_pool2d(of(kBFloat16)({1, 2, 4, 4}, 3), {2, 2}).dtype() == kBFloat16);
  CHECK(amax(h).dtype() == kBFloat16);
}

TEST_CASE("an MLP step under autocast matches f32 within bf16/f16 tolerance, gradients in f32") {
  for (DType low : kLows) {
    const std::string dt(dtype_name(low));
    CAPTURE(dt);
    Generator gen(3);
    Tensor x = randn({16, 20}, kFloat32, &gen);
    Tensor y = randint(0, 5, {16}, kInt64, &gen);
    Tensor w1 = (randn({32, 20}, kFloat32, &gen) * 0.2).set_requires_grad(true);
    Tensor b1 = zeros({32}).set_requires_grad(true);
    Tensor w2 = (randn({5, 32}, kFloat32, &gen) * 0.2).set_requires_grad(true);
    auto forward = [&] { return F::cross_entropy(F::linear(relu(F::linear(x, w1, b1)), w2), y); };

    Tensor ref = forward();
    ref.backward();
    Tensor g1 = w1.grad().clone(), g2 = w2.grad().clone(), gb = b1.grad().clone();
    for (Tensor w : {w1, w2, b1}) w.set_grad(Tensor());

    Tensor loss;
    {
      amp::AutocastGuard g(low);
      loss = forward();
    }
    CHECK(loss.dtype() == kFloat32);
    loss.backward();
    const double tol = low == kBFloat16 ? 3e-2 : 5e-3;
    CHECK(std::fabs(loss.item<double>() - ref.item<double>()) < tol * std::fabs(ref.item<double>()));
    for (auto [got, want] : {std::pair{w1.grad(), g1}, std::pair{w2.grad(), g2}, std::pair{b1.grad(), gb}}) {
      CHECK(got.dtype() == kFloat32);  // gradients come back in the weights' dtype
      CHECK(scaled_error(got, want) < 3 * tol);
    }
  }
}

TEST_CASE("a weight is cast once per guard and recast when it changes") {
  Tensor w = randn({5, 3}).set_requires_grad(true);
  Tensor x = randn({4, 3});
  {
    amp::AutocastGuard g(kFloat16);
    Tensor c1 = autocast::cast_input(AutocastOp::linear, w);
    Tensor c2 = autocast::cast_input(AutocastOp::matmul, w);
    CHECK(c1.is_same(c2));
    CHECK(c1.dtype() == kFloat16);
    CHECK(autocast::cache_size() == 1);
    // Activations are not cached: they are new every step.
    Tensor h = F::linear(x, w);
    F::linear(relu(h).to(kFloat32), randn({2, 5}).set_requires_grad(true));
    CHECK(autocast::cache_size() == 2);  // w and the second weight, not h
    {
      NoGradGuard ng;
      w.add_(1.0);  // what an optimizer step does: the version moves
    }
    Tensor c3 = autocast::cast_input(AutocastOp::linear, w);
    CHECK(!c3.is_same(c1));
    CHECK(test::identical(c3, w.detach().to(kFloat16)));
    {
      amp::AutocastGuard inner(kFloat16);  // nested: shares the outer guard's cache
      CHECK(autocast::cast_input(AutocastOp::linear, w).is_same(c3));
    }
    CHECK(autocast::cache_size() == 2);
  }
  CHECK(autocast::cache_size() == 0);  // the outermost guard's exit drops it
}

TEST_CASE("a cached cast under NoGradGuard does not stand in for one that needs a gradient") {
  Tensor w = randn({5, 3}).set_requires_grad(true);
  Tensor x = randn({4, 3});
  amp::AutocastGuard g(kBFloat16);
  {
    NoGradGuard ng;
    CHECK(!F::linear(x, w).requires_grad());
  }
  Tensor y = F::linear(x, w);
  REQUIRE(y.requires_grad());
  y.sum().backward();
  CHECK(w.grad().defined());
}

TEST_CASE("one cached cast feeds several graphs, each backward after the other, gradients add up") {
  Generator gen(5);
  Tensor w = randn({5, 3}, kFloat32, &gen).set_requires_grad(true);
  Tensor x1 = randn({4, 3}, kFloat32, &gen), x2 = randn({4, 3}, kFloat32, &gen);
  Tensor l1, l2;
  {
    amp::AutocastGuard g(kBFloat16);
    l1 = F::linear(x1, w).sum();
    l2 = F::linear(x2, w).sum();
    CHECK(autocast::cache_size() == 1);
  }
  l1.backward();
  l2.backward();  // runs through the shared cast node again: it saves nothing, so it survives
  // d/dw sum(x w^T) = column sums of x for every output row.
  Tensor want = (x1.sum({0}) + x2.sum({0})).unsqueeze(0).expand({5, 3});
  CHECK(w.grad().dtype() == kFloat32);
  CHECK(scaled_error(w.grad(), want) < 2e-2);
}

TEST_CASE("backward inside a guard runs without autocast and gives the same gradients") {
  Generator gen(7);
  Tensor w = randn({6, 4}, kFloat32, &gen).set_requires_grad(true);
  Tensor x = randn({3, 4}, kFloat32, &gen);
  auto grad_of = [&](bool inside) {
    w.set_grad(Tensor());
    amp::AutocastGuard g(kFloat16);
    Tensor loss = F::cross_entropy(F::linear(x, w), tensor<int64_t>({1, 0, 5}));
    if (inside) {
      loss.backward();
      CHECK(amp::is_autocast_enabled());  // restored after backward
    } else {
      amp::AutocastGuard off(kFloat16, /*enabled=*/false);
      loss.backward();
    }
    return w.grad().clone();
  };
  CHECK(test::identical(grad_of(true), grad_of(false)));
}

TEST_CASE("guards nest, restore, and can switch autocast off inside") {
  CHECK(!amp::is_autocast_enabled());
  Tensor a = randn({2, 3}), b = randn({3, 2});
  {
    amp::AutocastGuard outer(kBFloat16);
    CHECK(matmul(a, b).dtype() == kBFloat16);
    {
      amp::AutocastGuard inner(kFloat16);
      CHECK(matmul(a, b).dtype() == kFloat16);
      CHECK(amp::autocast_dtype() == kFloat16);
    }
    {
      amp::AutocastGuard off(kBFloat16, /*enabled=*/false);
      CHECK(matmul(a, b).dtype() == kFloat32);
    }
    CHECK(matmul(a, b).dtype() == kBFloat16);
  }
  CHECK(!amp::is_autocast_enabled());
  CHECK(matmul(a, b).dtype() == kFloat32);
}

TEST_CASE("a guard for a dtype that is not a lower precision is refused, naming it") {
  std::string msg = error_of([] { amp::AutocastGuard g(kFloat32); });
  CHECK(contains(msg, "AutocastGuard"));
  CHECK(contains(msg, "f32"));
  CHECK(!amp::is_autocast_enabled());
}

TEST_CASE("autocast leaves f64 alone: an f64 gradcheck through table ops passes inside a guard") {
  amp::AutocastGuard g(kBFloat16);
  Tensor x = (rand({3, 4}, kFloat64) - 0.5).set_requires_grad(true);
  Tensor w = (rand({5, 4}, kFloat64) - 0.5).set_requires_grad(true);
  auto fn = [](const std::vector<Tensor>& v) {
    Tensor h = F::linear(v[0], v[1]);
    return log_softmax(exp(h) + matmul(h, h.t()).sum({1}, true), 1);
  };
  auto r = autograd::gradcheck(fn, {x, w});
  CHECK_MESSAGE(r.ok, r.message);
}
