// SGD against PyTorch's update rule written out in plain f64 arithmetic: three steps for plain,
// momentum, dampening, Nesterov, weight decay and maximize; f32 (fused) and fallback paths.
#include <doctest/doctest.h>

#include "optim/sgd.h"
#include "optim_test_util.h"

using namespace kiln;
using namespace kiln::optim;
using namespace kiln::optim_test;

namespace {

// torch.optim.SGD's single-tensor step, element by element.
struct SGDReference {
  SGDOptions o;
  Vec buf;

  void step(Vec& p, const Vec& grad) {
    const bool first = buf.empty();
    if (first) buf.resize(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      double g = o.maximize ? -grad[i] : grad[i];
      if (o.weight_decay != 0) g += o.weight_decay * p[i];
      if (o.momentum != 0) {
        buf[i] = first ? g : o.momentum * buf[i] + (1 - o.dampening) * g;
        g = o.nesterov ? g + o.momentum * buf[i] : buf[i];
      }
      p[i] -= o.lr * g;
    }
  }
};

// Three steps of SGD on `p` (gradients from a real backward) against the reference.
void run_against_reference(Tensor p, const SGDOptions& o, double rtol) {
  SGD opt({p}, o);
  SGDReference ref{o, {}};
  Vec expect = kP0;
  for (int step = 0; step < 3; ++step) {
    backward_quadratic(p);
    ref.step(expect, quadratic_grad(expect));
    opt.step();
    check_close(values(p), expect, rtol, rtol);
  }
}

std::vector<std::pair<const char*, SGDOptions>> configs() {
  return {
      {"plain", SGDOptions(0.1)},
      {"momentum", SGDOptions(0.1).set_momentum(0.9)},
      {"dampening", SGDOptions(0.05).set_momentum(0.8).set_dampening(0.3)},
      {"nesterov", SGDOptions(0.1).set_momentum(0.9).set_nesterov()},
      {"weight decay", SGDOptions(0.1).set_weight_decay(0.05)},
      {"everything", SGDOptions(0.07).set_momentum(0.5).set_weight_decay(0.01).set_nesterov()},
      {"maximize", SGDOptions(0.02).set_momentum(0.9).set_dampening(0.1).set_weight_decay(0.1).set_maximize()},
  };
}

}  // namespace

TEST_CASE("SGD matches PyTorch's update rule for three steps (f64, fused path)") {
  for (auto& [name, o] : configs()) {
    CAPTURE(name);
    run_against_reference(tensor<double>(kP0, {2, 3}).set_requires_grad(true), o, 1e-13);
  }
}

TEST_CASE("SGD on f32 parameters agrees with the f64 reference to f32 precision") {
  for (auto& [name, o] : configs()) {
    CAPTURE(name);
    run_against_reference(tensor<double>(kP0, {2, 3}, kFloat32).set_requires_grad(true), o, 1e-5);
  }
}

TEST_CASE("SGD's tensor-op fallback (non-contiguous parameters) and f16 parameters follow the same rule") {
  for (auto& [name, o] : configs()) {
    CAPTURE(name);
    // A transposed view is not contiguous, so the fused loop does not apply.
    Tensor t = tensor<double>(kP0, {2, 3}).t().contiguous().t();
    REQUIRE_FALSE(t.is_contiguous());
    Tensor p = t.set_requires_grad(true);
    SGD opt({p}, o);
    SGDReference ref{o, {}};
    Vec expect = kP0;
    for (int step = 0; step < 3; ++step) {
      // The gradient, laid out as the parameter's logical order.
      p.set_grad(tensor<double>(quadratic_grad(expect), {2, 3}));
      ref.step(expect, quadratic_grad(expect));
      opt.step();
      check_close(values(p), expect, 1e-13, 1e-13);
    }
  }
  Tensor h = tensor<double>(kP0, {2, 3}, kFloat16).set_requires_grad(true);
  run_against_reference(h, SGDOptions(0.1).set_momentum(0.9).set_weight_decay(0.01), 2e-2);
}

TEST_CASE("SGD updates in place, keeps the handle, bumps the version and skips missing gradients") {
  Tensor a = tensor({1.0, 2.0}, kFloat64).set_requires_grad(true);
  Tensor b = tensor({3.0, 4.0}, kFloat64).set_requires_grad(true);
  TensorImpl* impl = a.unsafe_impl();
  void* data = a.data_ptr();
  uint32_t version = a.version();
  SGD opt({a, b}, SGDOptions(0.5).set_momentum(0.9));
  a.set_grad(tensor({1.0, -1.0}, kFloat64));
  opt.step();
  CHECK(a.unsafe_impl() == impl);
  CHECK(a.data_ptr() == data);
  CHECK(a.version() > version);
  CHECK(values(a) == Vec{0.5, 2.5});
  CHECK(values(b) == Vec{3.0, 4.0});
  CHECK(opt.state(0).count("momentum_buffer") == 1);
  CHECK(opt.state(1).empty());
  CHECK(a.requires_grad());
  CHECK_FALSE(a.grad().requires_grad());
}

TEST_CASE("SGD rejects invalid options, naming them") {
  Tensor p = tensor({1.0}, kFloat64).set_requires_grad(true);
  CHECK_THROWS_WITH(SGD({p}, SGDOptions(-0.1)), doctest::Contains("invalid lr -0.1"));
  CHECK_THROWS_WITH(SGD({p}, SGDOptions(0.1).set_nesterov()), doctest::Contains("nesterov"));
  CHECK_THROWS_WITH(SGD({p}, SGDOptions(0.1).set_momentum(0.9).set_dampening(0.1).set_nesterov()),
                    doctest::Contains("dampening"));
  CHECK_THROWS_WITH(SGD({p}, SGDOptions(0.1).set_weight_decay(-1)), doctest::Contains("weight_decay"));
}
