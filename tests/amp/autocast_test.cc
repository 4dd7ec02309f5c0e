// Autocast: every op of the policy table produces the dtype its class promises (and only under a
// guard), results agree with f32 within the lower precision's tolerance, gradients reach the
// weights in their own dtype, and a weight is cast once per guard.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <string>

#include "amp/amp.h"
#include "autograd/gradcheck.h"
#include "core/conv.h"
#include "nn/functional.h"
#include "tests/amp/amp_test_util.h"

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

// One way to call each op of the table, with its floating inputs made by `in` (the first operand
// of a promote op always f32).
using Runner = std::function<Tensor(const Make& in)>;

std::map<std::string, Runner> runners() {
  const Tensor target = tensor<int64_t>({0, 2, 1, 4});
  return {
      {"matmul", [](const Make& in) { return matmul(in({4, 3}, 1), in({3, 5}, 2)); }},
      {"mm", [](const Make& in) { return mm(in({4, 3}, 1), in({3, 5}, 2)); }},
      {"bmm", [](const Make& in) { return bmm(in({2, 4, 3}, 1), in({2, 3, 5}, 2)); }},
      {"linear", [](const Make& in) { return F::linear(in({4, 3}, 1), in({5, 3}, 2), in({5}, 3)); }},
      {"conv2d", [](const Make& in) { return conv2d(in({1, 2, 5, 5}, 1), in({3, 2, 3, 3}, 2), in({3}, 3)); }},
      {"exp", [](const Make& in) { return exp(in({4, 5}, 1)); }},
      {"log", [](const Make& in) { return log(in.pos({4, 5}, 1)); }},
      {"log1p", [](const Make& in) { return log1p(in.pos({4, 5}, 1)); }},
      {"expm1", [](const Make& in) { return expm1(in({4, 5}, 1)); }},
      {"rsqrt", [](const Make& in) { return rsqrt(in.pos({4, 5}, 1)); }},
      {"reciprocal", [](const Make& in) { return reciprocal(in.pos({4, 5}, 1)); }},
      {"pow_scalar", [](const Make& in) { return pow(in.pos({4, 5}, 1), 1.7); }},
      {"pow", [](const Make& in) { return pow(in.pos({4, 5}, 1), in({4, 5}, 2)); }},
      {"softplus", [](const Make& in) { return softplus(in({4, 5}, 1), 2.0, 1.0); }},
      {"sum", [](const Make& in) { return sum(in({4, 5}, 1), {1}); }},
      {"mean", [](const Make& in) { return mean(in({4, 5}, 1)); }},
      {"prod", [](const Make& in) { return prod(in.pos({4, 5}, 1), {0}); }},
      {"var", [](const Make& in) { return var(in({4, 5}, 1), {1}); }},
      {"std", [](const Make& in) { return kiln::std(in({4, 5}, 1), {1}); }},
      {"logsumexp", [](const Make& in) { return logsumexp(in({4, 5}, 1), {1}); }},
      {"softmax", [](const Make& in) { return softmax(in({4, 5}, 1), 1); }},
      {"log_softmax", [](const Make& in) { return log_softmax(in({4, 5}, 1), 1); }},
      {"layer_norm", [](const Make& in) { return F::layer_norm(in({4, 6}, 1), {6}, in.pos({6}, 2), in({6}, 3)); }},
      {"batch_norm",
       [](const Make& in) {
         return F::batch_norm(in({4, 3}, 1), zeros({3}), ones({3}), in.pos({3}, 2), in({3}, 3), /*training=*/true);
       }},
      {"cross_entropy", [=](const Make& in) { return F::cross_entropy(in({4, 5}, 1), target); }},
      {"nll_loss", [=](const Make& in) { return F::nll_loss(in({4, 5}, 1, -3, 0), target); }},
      {"mse_loss", [](const Make& in) { return F::mse_loss(in({4, 5}, 1), in({4, 5}, 2)); }},
      {"l1_loss", [](const Make& in) { return F::l1_loss(in({4, 5}, 1), in({4, 5}, 2)); }},
      {"binary_cross_entropy_with_logits",
       [](const Make& in) { return F::binary_cross_entropy_with_logits(in({4, 5}, 1), in.pos({4, 5}, 2) / 2.0); }},
      {"binary_cross_entropy",
       [](const Make& in) { return F::binary_cross_entropy(in({4, 5}, 1, 0.05, 0.95), in({4, 5}, 2, 0, 1)); }},
      {"kl_div", [](const Make& in) { return F::kl_div(in({4, 5}, 1, -3, -0.1), in({4, 5}, 2, 0.05, 0.8)); }},
      {"smooth_l1_loss", [](const Make& in) { return F::smooth_l1_loss(in({4, 5}, 1), in({4, 5}, 2)); }},
      {"huber_loss", [](const Make& in) { return F::huber_loss(in({4, 5}, 1), in({4, 5}, 2)); }},
      {"group_norm", [](const Make& in) { return F::group_norm(in({2, 4, 3}, 1), 2, in.pos({4}, 2), in({4}, 3)); }},
      {"rms_norm", [](const Make& in) { return F::rms_norm(in({4, 6}, 1), {6}, in.pos({6}, 2)); }},
      {"normalize", [](const Make& in) { return F::normalize(in({4, 6}, 1)); }},
      {"cosine_similarity", [](const Make& in) { return F::cosine_similarity(in({4, 6}, 1), in({4, 6}, 2)); }},
      {"scatter_add",
       [](const Make& in) {
         Tensor idx = tensor<int64_t>({0, 2, 1, 0, 2, 1}, {2, 3});
         return scatter_add(Make{kFloat32, kFloat32}({3, 3}, 1), 0, idx, in({2, 3}, 2));
       }},
      {"index_add",
       [](const Make& in) {
         return index_add(Make{kFloat32, kFloat32}({3, 4}, 1), 0, tensor<int64_t>({2, 0}), in({2, 4}, 2));
       }},
  };
}

/// Inputs of dtype t.
Make of(DType t) { return Make{t, t}; }

const DType kLows[] = {kBFloat16, kFloat16};

}  // namespace

TEST_CASE("every op of the policy table has a runner here, so the table cannot grow untested") {
  auto rs = runners();
  for (const AutocastEntry& e : autocast_policy())
    CHECK_MESSAGE(rs.count(std::string(e.name)), "no test runner for ", e.name);
  CHECK(rs.size() == autocast_policy().size());
}

TEST_CASE("each op's output dtype is what its class promises, only under a guard") {
  auto rs = runners();
  for (DType low : kLows) {
    for (const auto& [op_name, cls] : autocast_policy()) {
      const std::string name(op_name);
      const Runner& run = rs.at(name);
      const std::string dt(dtype_name(low));
      CAPTURE(name);
      CAPTURE(dt);
      switch (cls) {
        case AutocastClass::lower: {
          CHECK(run(of(kFloat32)).dtype() == kFloat32);  // no guard: untouched
          amp::AutocastGuard g(low);
          CHECK(run(of(kFloat32)).dtype() == low);
          CHECK(run(of(kFloat64)).dtype() == kFloat64);  // f64 is never lowered
          break;
        }
        case AutocastClass::fp32: {
          CHECK(run(of(low)).dtype() == low);
          amp::AutocastGuard g(low);
          CHECK(run(of(low)).dtype() == kFloat32);
          CHECK(run(of(kFloat64)).dtype() == kFloat64);
          break;
        }
        case AutocastClass::promote: {
          // f32 input, low-precision source: one dtype is required, so without a guard it fails.
          CHECK(!error_of([&] { run(of(low)); }).empty());
          amp::AutocastGuard g(low);
          CHECK(run(of(low)).dtype() == kFloat32);
          break;
        }
      }
    }
  }
}

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

TEST_CASE("lower-class results agree with f32 within the lower precision") {
  auto rs = runners();
  // Inputs are rounded to the lower dtype and the product to it again; the f32 accumulation adds
  // nothing visible. bf16 keeps 8 significant bits, f16 11.
  const std::map<DType, double> tol = {{kBFloat16, 2e-2}, {kFloat16, 3e-3}};
  for (DType low : kLows)
    for (const auto& [op_name, cls] : autocast_policy()) {
      if (cls != AutocastClass::lower) continue;
      const std::string name(op_name);
      const Runner& run = rs.at(name);
      Tensor ref = run(of(kFloat32)), got;
      {
        amp::AutocastGuard g(low);
        got = run(of(kFloat32));
      }
      const std::string dt(dtype_name(low));
      CAPTURE(name);
      CAPTURE(dt);
      const double err = scaled_error(got, ref);
      CHECK(err < tol.at(low));
      CHECK(err > 0);  // it did run in the lower precision
    }
}

TEST_CASE("fp32-class ops compute in f32: bit for bit the f32 result of the widened inputs") {
  auto rs = runners();
  for (DType low : kLows)
    for (const auto& [op_name, cls] : autocast_policy()) {
      if (cls != AutocastClass::fp32) continue;
      const std::string name(op_name);
      const Runner& run = rs.at(name);
      Tensor in_low = run(of(low));  // no guard: computed in (and rounded to) the low dtype
      Tensor got;
      {
        amp::AutocastGuard g(low);
        got = run(of(low));
      }
      // The same low-precision values widened by hand and run in f32 without a guard.
      Tensor ref = run(Make{low, kFloat32});
      const std::string dt(dtype_name(low));
      CAPTURE(name);
      CAPTURE(dt);
      CHECK(test::identical(got, ref));
      CHECK(scaled_error(got, in_low) < 5e-2);  // and near the low-precision computation
    }
  // One explicit check of "in f32": the softmax of bf16 inputs equals the f32 softmax of their
  // widened values bit for bit, and differs from the bf16 softmax.
  Tensor x = of(kBFloat16)({3, 7}, 9);
  Tensor got;
  {
    amp::AutocastGuard g(kBFloat16);
    got = softmax(x, 1);
  }
  CHECK(test::identical(got, softmax(x.to(kFloat32), 1)));
  CHECK(!test::identical(got, softmax(x, 1).to(kFloat32)));
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
