// The tape and the backward engine: accumulation, retain_graph, hooks, NoGradGuard, detach,
// in-place checks, and a deep graph walked without recursion.
#include <doctest/doctest.h>

#include "autograd/autograd.h"
#include "core/op_table.h"
#include "tests/testing/compare.h"

using namespace kiln;

TEST_CASE("leaf gradients accumulate across backward calls") {
  Tensor x = tensor({1.0, 2.0, 3.0}, kFloat64).set_requires_grad(true);
  (x * x).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
  (x * 3.0).sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{5, 7, 9});
}

TEST_CASE("backward with an explicit gradient, and the error for an implied one") {
  Tensor x = tensor({1.0, 2.0}, kFloat64).set_requires_grad(true);
  Tensor y = x * 2.0;
  CHECK_THROWS_WITH(y.backward(), doctest::Contains("one-element"));
  y.backward(tensor({1.0, 10.0}, kFloat64));
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 20});
}

TEST_CASE("a second backward through a freed graph fails, retain_graph keeps it") {
  Tensor x = tensor({1.0, 2.0}, kFloat64).set_requires_grad(true);
  Tensor loss = (x.exp() * x).sum();
  loss.backward(Tensor(), /*retain_graph=*/true);
  loss.backward();
  CHECK_THROWS_WITH(loss.backward(), doctest::Contains("second time"));
}

TEST_CASE("NoGradGuard records nothing; detach cuts the graph") {
  Tensor x = tensor({1.0, 2.0}, kFloat64).set_requires_grad(true);
  {
    NoGradGuard g;
    Tensor y = x * 2.0;
    CHECK_FALSE(y.requires_grad());
  }
  Tensor d = (x * 2.0).detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.is_leaf());
  Tensor z = (x * d).sum();
  z.backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{2, 4});
}

TEST_CASE("tensor hooks see and may replace the gradient") {
  Tensor x = tensor({1.0, 2.0}, kFloat64).set_requires_grad(true);
  Tensor y = x * 3.0;
  int calls = 0;
  y.register_hook([&](const Tensor& g) {
    ++calls;
    CHECK(g.to_vector<double>() == std::vector<double>{1, 1});
    return g * 10.0;
  });
  y.sum().backward();
  CHECK(calls == 1);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{30, 30});
}

TEST_CASE("a leaf takes over its first gradient when nothing else holds it, and copies it otherwise") {
  // LinearBackward's weight gradient is mm's result: a view squeezed out of bmm's [1, out, in].
  Tensor x = randn({8, 3}, kFloat64), w = randn({5, 3}, kFloat64).set_requires_grad(true);
  const void* incoming = nullptr;
  w.register_hook([&](const Tensor& g) {
    incoming = g.data_ptr();
    return Tensor();
  });
  op::linear(x, w, Tensor()).sum().backward();
  CHECK(w.grad().data_ptr() == incoming);  // taken over, not copied
  CHECK(w.grad().unsafe_impl()->view_base == nullptr);
  const Tensor expected = ones({8, 5}, kFloat64).t().matmul(x);
  CHECK(test::allclose(w.grad(), expected));

  // A gradient someone else keeps is copied: accumulating into w's must not change theirs.
  Tensor v = randn({5, 3}, kFloat64).set_requires_grad(true), kept;
  v.register_hook([&](const Tensor& g) {
    kept = g;
    return Tensor();
  });
  op::linear(x, v, Tensor()).sum().backward();
  CHECK(v.grad().data_ptr() != kept.data_ptr());
  const std::vector<double> before = kept.to_vector<double>();
  op::linear(x, v, Tensor()).sum().backward();
  CHECK(kept.to_vector<double>() == before);
  CHECK(test::allclose(v.grad(), expected * 2.0));
}

TEST_CASE("post-accumulate hooks fire once per backward, in reverse order of use") {
  Tensor w1 = randn({4, 4}, kFloat64).set_requires_grad(true);
  Tensor w2 = randn({4, 4}, kFloat64).set_requires_grad(true);
  Tensor w3 = randn({4, 4}, kFloat64).set_requires_grad(true);
  std::vector<int> order;
  w1.register_post_accumulate_grad_hook([&](const Tensor& t) { order.push_back(1); CHECK(t.grad().defined()); });
  w2.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back(2); });
  w3.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back(3); });
  Tensor x = randn({2, 4}, kFloat64);
  Tensor h = matmul(matmul(matmul(x, w1).tanh(), w2).tanh(), w3);
  h.sum().backward();
  CHECK(order == std::vector<int>{3, 2, 1});
  order.clear();
  matmul(matmul(matmul(x, w1).tanh(), w2).tanh(), w3).sum().backward();
  CHECK(order == std::vector<int>{3, 2, 1});
}

TEST_CASE("a leaf used twice gets one accumulated gradient and one hook call") {
  Tensor w = tensor({2.0}, kFloat64).set_requires_grad(true);
  int calls = 0;
  w.register_post_accumulate_grad_hook([&](const Tensor&) { ++calls; });
  (w * w + w).sum().backward();
  CHECK(calls == 1);
  CHECK(w.grad().item<double>() == doctest::Approx(5.0));
}

TEST_CASE("retain_grad keeps a non-leaf's gradient") {
  Tensor x = tensor({1.0, 2.0}, kFloat64).set_requires_grad(true);
  Tensor y = x * 2.0;
  y.retain_grad();
  (y * y).sum().backward();
  CHECK(y.grad().to_vector<double>() == std::vector<double>{4, 8});
}

TEST_CASE("modifying a tensor saved for backward is caught") {
  Tensor x = tensor({1.0, 2.0}, kFloat64).set_requires_grad(true);
  Tensor y = x * 2.0;
  Tensor z = y * y;  // saves y
  y.add_(1.0);
  CHECK_THROWS_WITH(z.sum().backward(), doctest::Contains("modified by an in-place operation"));
}

TEST_CASE("in-place on a leaf that requires grad is refused, but allowed under NoGradGuard") {
  Tensor w = tensor({1.0, 2.0}, kFloat64).set_requires_grad(true);
  CHECK_THROWS_WITH(w.add_(1.0), doctest::Contains("add_"));
  {
    NoGradGuard g;
    w.mul_(2.0);
  }
  CHECK(w.to_vector<double>() == std::vector<double>{2, 4});
}

TEST_CASE("in-place on a non-leaf is recorded") {
  Tensor x = tensor({1.0, 2.0}, kFloat64).set_requires_grad(true);
  Tensor y = x * 2.0;
  y.mul_(x);  // y = 2x^2
  y.add_(1.0);
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{4, 8});
}

TEST_CASE("a deep chain is walked without recursion") {
  Tensor x = tensor({1.0}, kFloat64).set_requires_grad(true);
  Tensor y = x;
  for (int i = 0; i < 50000; ++i) y = y * 1.0;
  y.sum().backward();
  CHECK(x.grad().item<double>() == 1.0);
}

TEST_CASE("gradients flow to the right dtype") {
  Tensor x = tensor({1.0, 2.0}, kFloat32).set_requires_grad(true);
  Tensor y = (x.to(kFloat64) * 2.0).sum();
  y.backward();
  CHECK(x.grad().dtype() == kFloat32);
  CHECK(x.grad().to_vector<float>() == std::vector<float>{2, 2});
}

TEST_CASE("gradcheck catches a wrong gradient") {
  // A hook that doubles the gradient makes backward disagree with finite differences.
  auto r = autograd::gradcheck(
      [](const std::vector<Tensor>& v) {
        Tensor y = v[0] * 1.0;
        if (y.requires_grad()) y.register_hook([](const Tensor& g) { return g * 2.0; });
        return y.exp();
      },
      {randn({3}, kFloat64).set_requires_grad(true)});
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("analytical") != std::string::npos);
}

TEST_CASE("printing a non-leaf names its grad_fn") {
  Tensor x = tensor({1.0, 2.0}, kFloat64).set_requires_grad(true);
  std::string s = (x * 2.0).str();
  CHECK(s.find("grad_fn=<MulBackward>") != std::string::npos);
}

TEST_CASE("a hook registered after an in-place op sees the gradient") {
  Tensor x = tensor({1.0, 2.0}, kFloat64).set_requires_grad(true);
  Tensor y = x * 2.0;
  y.mul_(3.0);
  int calls = 0;
  y.register_hook([&](const Tensor& g) {
    ++calls;
    return Tensor();
  });
  y.sum().backward();
  CHECK(calls == 1);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{6, 6});
}

TEST_CASE("queue_callback runs after the whole graph was walked, in order, and its error reaches backward") {
  Tensor w = randn({3}).set_requires_grad();
  Tensor v = randn({3}).set_requires_grad();
  std::vector<std::string> log;
  w.register_post_accumulate_grad_hook([&](const Tensor&) {
    log.push_back("w");
    autograd::queue_callback([&] {
      log.push_back(fmt::format("first v.grad={}", v.grad().defined()));
      autograd::queue_callback([&] { log.push_back("queued by a callback"); });
    });
    autograd::queue_callback([&] { log.push_back("second"); });
  });
  v.register_post_accumulate_grad_hook([&](const Tensor&) { log.push_back("v"); });
  ((w * 2).sum() + (v * 3).sum()).backward();
  REQUIRE(log.size() == 5);
  CHECK(log[3] == "second");
  CHECK(log[2] == "first v.grad=true");
  CHECK(log[4] == "queued by a callback");

  CHECK_THROWS_WITH_AS(autograd::queue_callback([] {}), doctest::Contains("outside a backward pass"), kiln::Error);
  Tensor u = randn({2}).set_requires_grad();
  u.register_post_accumulate_grad_hook([](const Tensor&) { autograd::queue_callback([] { kiln::fail("boom"); }); });
  CHECK_THROWS_WITH_AS(u.sum().backward(), doctest::Contains("boom"), kiln::Error);
  // The failed pass left no callback list behind.
  CHECK_THROWS_WITH_AS(autograd::queue_callback([] {}), doctest::Contains("outside a backward pass"), kiln::Error);
}

