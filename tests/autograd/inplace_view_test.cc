// PyTorch's view + in-place semantics: an in-place op on a tensor, a view of it, a view of a
// view or a transposed view carries gradients exactly as the out-of-place equivalent does (into
// its operands through the written region, and around the region into the base's history).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>

#include "autograd/autograd.h"
#include "autograd/node.h"
#include "grad_test_util.h"

using namespace kiln;

namespace {

/// Equal to 1e-12 (relative, plus absolute); two undefined gradients match.
bool close(const Tensor& a, const Tensor& b, double tol = 1e-12) { return test::close(a, b, tol); }

/// An undefined gradient counts as zeros (a branch that received none).
Tensor grad_or_zeros(const Tensor& t) { return t.grad().defined() ? t.grad() : zeros_like(t); }

struct Target {
  const char* name;
  std::function<Tensor(const Tensor&)> of;  // the part of y [4, 6] that is written
};

const Target kTargets[] = {
    {"base", [](const Tensor& y) { return y; }},
    {"view", [](const Tensor& y) { return y.slice(1, 1, 4); }},
    {"view of view", [](const Tensor& y) { return y.slice(1, 1, 5).slice(0, 1, 3); }},
    {"transposed view", [](const Tensor& y) { return y.transpose(0, 1).slice(0, 2, 5); }},
};

struct Case {
  const char* name;
  std::function<void(Tensor& t, const Tensor& o, const Tensor& mask)> inplace;
  std::function<Tensor(const Tensor& cur, const Tensor& o, const Tensor& mask)> out_of_place;
};

const Case kCases[] = {
    {"fill_", [](Tensor& t, const Tensor&, const Tensor&) { t.fill_(2.5); },
     [](const Tensor& c, const Tensor&, const Tensor&) { return full_like(c, 2.5); }},
    {"zero_", [](Tensor& t, const Tensor&, const Tensor&) { t.zero_(); },
     [](const Tensor& c, const Tensor&, const Tensor&) { return zeros_like(c); }},
    {"copy_", [](Tensor& t, const Tensor& o, const Tensor&) { t.copy_(o); },
     [](const Tensor&, const Tensor& o, const Tensor&) { return o * 1.0; }},
    {"copy_ (broadcast row)", [](Tensor& t, const Tensor& o, const Tensor&) { t.copy_(o.select(0, 0)); },
     [](const Tensor& c, const Tensor& o, const Tensor&) { return o.select(0, 0).expand(c.sizes()) * 1.0; }},
    {"add_", [](Tensor& t, const Tensor& o, const Tensor&) { t.add_(o, 2.0); },
     [](const Tensor& c, const Tensor& o, const Tensor&) { return c + o * 2.0; }},
    {"add_ scalar", [](Tensor& t, const Tensor&, const Tensor&) { t.add_(1.5); },
     [](const Tensor& c, const Tensor&, const Tensor&) { return c + 1.5; }},
    {"sub_", [](Tensor& t, const Tensor& o, const Tensor&) { t.sub_(o); },
     [](const Tensor& c, const Tensor& o, const Tensor&) { return c - o; }},
    {"mul_", [](Tensor& t, const Tensor& o, const Tensor&) { t.mul_(o); },
     [](const Tensor& c, const Tensor& o, const Tensor&) { return c * o; }},
    {"mul_ scalar", [](Tensor& t, const Tensor&, const Tensor&) { t.mul_(3.0); },
     [](const Tensor& c, const Tensor&, const Tensor&) { return c * 3.0; }},
    {"div_", [](Tensor& t, const Tensor& o, const Tensor&) { t.div_(o); },
     [](const Tensor& c, const Tensor& o, const Tensor&) { return c / o; }},
    {"div_ scalar", [](Tensor& t, const Tensor&, const Tensor&) { t.div_(4.0); },
     [](const Tensor& c, const Tensor&, const Tensor&) { return c / 4.0; }},
    {"masked_fill_", [](Tensor& t, const Tensor&, const Tensor& m) { t.masked_fill_(m, -1.0); },
     [](const Tensor& c, const Tensor&, const Tensor& m) { return masked_fill(c, m, -1.0); }},
};

/// y with the target region replaced by `new_values`, built from out-of-place ops only.
Tensor replace_region(const Tensor& y, const Target& target, const std::function<Tensor(const Tensor&)>& op) {
  Tensor positions = arange(y.numel()).view(y.sizes());
  Tensor idx = target.of(positions).reshape({-1});
  Tensor flat = y.reshape({-1});
  Tensor cur = flat.index_select(0, idx).view(target.of(positions).sizes());
  Tensor fresh = op(cur).reshape({-1});
  Tensor inside = zeros({y.numel()}, kInt64).scatter_add(0, idx, ones({idx.numel()}, kInt64)) > 0;
  Tensor written = zeros({y.numel()}, kFloat64).scatter_add(0, idx, fresh);
  return where(inside, written, flat).view(y.sizes());
}

}  // namespace

TEST_CASE("every in-place op on a tensor, a view, a view of a view and a transposed view: gradients as out of place") {
  for (bool base_requires_grad : {true, false}) {
    for (const Target& target : kTargets) {
      for (const Case& c : kCases) {
        CAPTURE(std::string(c.name) + " on " + target.name + (base_requires_grad ? "" : " (base needs no grad)"));
        Tensor x = test::leaf({4, 6});
        Tensor w = randn({4, 6}, kFloat64);
        Tensor tshape = target.of(zeros({4, 6}));
        Tensor o = test::leaf(tshape.sizes(), 1.0, 2.0);  // kept away from 0: div_
        Tensor mask = rand(tshape.sizes(), kFloat64) > 0.5;
        auto make_y = [&] { return base_requires_grad ? x * 1.5 : x.detach() * 1.5; };

        Tensor y = make_y();
        Tensor t = target.of(y);
        c.inplace(t, o, mask);
        Tensor loss = (y * w).sum();
        if (loss.requires_grad()) loss.backward();  // fill_ of a base that needs no grad: nothing to do
        Tensor gx = grad_or_zeros(x), go = grad_or_zeros(o);
        x.set_grad(Tensor());
        o.set_grad(Tensor());

        Tensor y_ref = replace_region(make_y(), target, [&](const Tensor& cur) { return c.out_of_place(cur, o, mask); });
        CHECK(close(y.detach(), y_ref.detach()));
        CHECK(loss.requires_grad() == y_ref.requires_grad());
        if (y_ref.requires_grad()) (y_ref * w).sum().backward();
        CHECK(close(gx, grad_or_zeros(x)));
        CHECK(close(go, grad_or_zeros(o)));

        // And against finite differences in f64.
        if (!base_requires_grad) continue;
        CHECK_GRAD(
            [&](test::Inputs in) {
              Tensor yy = in[0] * 1.5;
              Tensor tt = target.of(yy);
              c.inplace(tt, in[1], mask);
              return yy * w;
            },
            test::leaf({4, 6}), test::leaf(tshape.sizes(), 1.0, 2.0));
      }
    }
  }
}

TEST_CASE("copy_ into a slice of a tensor that needs no grad: the source gets the gradient (issue example)") {
  Tensor x = test::leaf({3, 2});
  Tensor w = randn({3, 5}, kFloat64);
  Tensor y = zeros({3, 5}, kFloat64);
  y.slice(1, 1, 3).copy_(x);
  CHECK(y.requires_grad());
  CHECK_FALSE(y.is_leaf());
  CHECK(y.grad_fn()->name() == "CopySlices");
  Tensor loss = (y * w).sum();
  loss.backward();
  CHECK(close(x.grad(), w.slice(1, 1, 3).contiguous()));
}

TEST_CASE("an in-place write through a view of a non-leaf reaches the non-leaf's inputs (issue example)") {
  Tensor x = test::leaf({2, 3});
  Tensor y = x * 2.0;
  y.slice(1, 0, 1).zero_();
  y.sum().backward();
  CHECK(x.grad().to_vector<double>() == std::vector<double>{0, 2, 2, 0, 2, 2});
}

TEST_CASE("a view made before its base was written follows the base's new history") {
  Tensor x = test::leaf({4});
  Tensor a = test::leaf({2});
  Tensor y = x * 1.0;
  Tensor v1 = y.slice(0, 0, 2);
  Tensor v2 = y.slice(0, 1, 3);  // overlaps v1 at element 1
  v1.mul_(a);
  v2.sum().backward();           // d/da of (y[1] * a[1]) + y[2] = x[1]
  CHECK(close(a.grad(), tensor({0.0, x.to_vector<double>()[1]}, kFloat64)));
  CHECK(close(x.grad(), tensor({0.0, a.to_vector<double>()[1], 1.0, 0.0}, kFloat64)));
}

TEST_CASE("split's pieces: one node joins their gradients; a piece written in place keeps the others right") {
  Tensor x = test::leaf({6});
  Tensor y = x * 1.0;
  std::vector<Tensor> p = y.split(2);
  REQUIRE(p.size() == 3);
  CHECK(p[0].grad_fn() == p[2].grad_fn());  // one SplitBackward, as PyTorch's
  Tensor a = test::leaf({2});
  p[1].mul_(a);                              // the other pieces follow y's new history
  (p[0] * 3.0 + p[1] + p[2] * 5.0).sum().backward();
  const auto av = a.to_vector<double>(), xv = x.to_vector<double>();
  CHECK(close(x.grad(), tensor({3.0, 3.0, av[0], av[1], 5.0, 5.0}, kFloat64)));
  CHECK(close(a.grad(), tensor({xv[2], xv[3]}, kFloat64)));
  // A piece that gets no gradient contributes zeros.
  Tensor z = test::leaf({4});
  (z * 1.0).split(3)[1].sum().backward();
  CHECK(z.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 1});
}

TEST_CASE("writing a base in place updates the history of its existing views") {
  Tensor x = test::leaf({3});
  Tensor s = test::leaf({3});
  Tensor y = x * 1.0;
  Tensor v = y.slice(0, 1, 3);
  y.mul_(s);
  v.sum().backward();
  auto sv = s.to_vector<double>(), xv = x.to_vector<double>();
  CHECK(close(x.grad(), tensor({0.0, sv[1], sv[2]}, kFloat64)));
  CHECK(close(s.grad(), tensor({0.0, xv[1], xv[2]}, kFloat64)));
}

TEST_CASE("copy_ from a leaf, fill_ over a history: the gradient goes to the new value only") {
  Tensor p = test::leaf({3});
  Tensor y = zeros({3}, kFloat64);
  y.copy_(p);
  (y * 2.0).sum().backward();
  CHECK(p.grad().to_vector<double>() == std::vector<double>{2, 2, 2});

  Tensor x = test::leaf({3});
  Tensor z = x * 3.0;
  z.fill_(1.0);
  CHECK(z.requires_grad());  // as PyTorch: still in the graph, with zero gradient to x
  CHECK(z.grad_fn()->name() == "FillBackward");
  (z * 2.0).sum().backward();
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("copy_ of a tensor that requires grad into an integer tensor records nothing") {
  Tensor x = test::leaf({3}, 0.0, 5.0);
  Tensor i = zeros({3}, kInt64);
  i.copy_(x);
  CHECK_FALSE(i.requires_grad());
  CHECK(i.to_vector<int64_t>() == x.detach().to(kInt64).to_vector<int64_t>());
}

TEST_CASE("in-place writes that autograd cannot follow are refused with a clear error, changing nothing") {
  Tensor leaf = test::leaf({4});
  Tensor before = leaf.detach().clone();
  CHECK_THROWS_WITH(leaf.slice(0, 0, 2).zero_(), doctest::Contains("view (shape [2]) of a leaf"));
  CHECK(close(leaf.detach(), before));

  Tensor y = leaf * 2.0;
  Tensor v;
  {
    NoGradGuard g;
    v = y.slice(0, 0, 2);
  }
  CHECK_THROWS_WITH(v.add_(1.0), doctest::Contains("made in no-grad mode"));

  // A tensor saved for backward and then overwritten through a view is caught by its version.
  Tensor e = leaf.exp();
  e.slice(0, 0, 1).zero_();
  CHECK_THROWS_WITH(e.sum().backward(), doctest::Contains("modified by an in-place operation"));
}

TEST_CASE("under NoGradGuard views are written directly and record nothing") {
  Tensor x = test::leaf({3});
  Tensor y = x * 2.0;
  {
    NoGradGuard g;
    y.slice(0, 0, 1).fill_(7.0);
  }
  CHECK(y.to_vector<double>()[0] == 7.0);
  CHECK(y.grad_fn()->name() == "MulBackward");
}
