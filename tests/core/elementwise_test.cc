// Elementwise semantics the op database's rows do not state (tests/testing/op_db_*.cc check every
// unary, binary and comparison op's values and gradients against an f64 reference: threaded,
// broadcast, strided, f16/bf16, integer dtypes, saturation, and PyTorch's gradients at kinks):
// promotion rules that depend on an argument, bool arithmetic, where/masked_fill's dtype rules,
// in-place arithmetic and versions, empty and 0-dim tensors, and the errors.
#include <cmath>
#include <functional>
#include <string>

#include "core/grad_mode.h"
#include "tests/testing/compare.h"

using namespace kiln;

namespace {

/// The f64 reference tensor of applying `f` to every element of x.
Tensor ref1(const Tensor& x, const std::function<double(double)>& f) {
  auto v = x.to_vector<double>();
  for (double& e : v) e = f(e);
  return tensor(v, x.sizes(), kFloat64);
}

/// The f64 reference of f(a, b) with NumPy broadcasting (a, b converted to `shape` first).
Tensor ref2(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  Shape shape = broadcast_shapes(a.sizes(), b.sizes(), "ref2");
  // Multiplying by ones of the broadcast shape materialises each operand at that shape.
  auto x = (a.to(kFloat64) + zeros(shape, kFloat64)).to_vector<double>();
  auto y = (b.to(kFloat64) + zeros(shape, kFloat64)).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) x[i] = f(x[i], y[i]);
  return tensor(x, shape, kFloat64);
}

/// A transposed (non-contiguous) view of a fresh random 2-D tensor of shape [rows, cols].
Tensor transposed(const Tensor& base) {
  REQUIRE(base.dim() == 2);
  return make_view(base, {base.size(1), base.size(0)}, {1, base.size(1)}, base.offset());
}

Tensor normal(const Shape& s, DType dt = kFloat32) { return (randn(s, kFloat64) * 2.0).to(dt); }

}  // namespace

TEST_CASE("integer tensors: which ops keep the dtype follows the operand, and what is refused") {
  // The values and result dtypes of every integer row are the op database's (tests/testing); here
  // the promotion rules that depend on an argument's value or type, and the refusals.
  Tensor i = tensor(std::vector<int64_t>{-3, 0, 2, 5});
  CHECK(kiln::pow(i, 3).dtype() == kInt64);
  CHECK(kiln::pow(i, 0.5).dtype() == kFloat32);
  CHECK(kiln::clamp(i, 0, 3).dtype() == kInt64);
  CHECK(kiln::clamp(i, std::nullopt, 1).to_vector<int64_t>() == std::vector<int64_t>{-3, 0, 1, 1});
  CHECK(kiln::clamp(i, 0.5, std::nullopt).dtype() == kFloat32);
  CHECK(kiln::sqrt(tensor(std::vector<int32_t>{4, 9})).to_vector<float>() == std::vector<float>{2, 3});
  CHECK_THROWS_WITH(kiln::pow(i, -1), doctest::Contains("negative integer powers"));
  CHECK_THROWS_WITH(kiln::clamp(i, std::nullopt, std::nullopt), doctest::Contains("clamp"));
}

TEST_CASE("relu and clamp pass NaN through") {
  Tensor x = tensor({NAN, -1.0, 2.0});
  auto r = kiln::relu(x).to_vector<float>();
  CHECK(std::isnan(r[0]));
  CHECK(r[1] == 0);
  auto c = kiln::clamp(x, 0, 1).to_vector<float>();
  CHECK(std::isnan(c[0]));
  CHECK(c[2] == 1);
}

TEST_CASE("integer alpha, true division and number operands") {
  Tensor a = tensor(std::vector<int64_t>{7, -8, 9, 2}), b = tensor(std::vector<int64_t>{2, 3, -4, 5});
  CHECK(kiln::add(a, b, 2).to_vector<int64_t>() == std::vector<int64_t>{11, -2, 1, 12});
  CHECK_THROWS_WITH(kiln::add(a, b, 0.5), doctest::Contains("alpha"));
  Tensor q = a / b;
  CHECK(q.dtype() == kFloat32);
  CHECK(q.to_vector<float>() == std::vector<float>{3.5f, -8.0f / 3.0f, -2.25f, 0.4f});
  CHECK(((a / 2) * 2).to_vector<float>() == std::vector<float>{7, -8, 9, 2});
  CHECK((a + 1).dtype() == kInt64);
  CHECK((a * 0.5).dtype() == kFloat32);
}

TEST_CASE("bool arithmetic follows PyTorch: + is or, * is and, - is refused") {
  Tensor a = tensor(std::vector<bool>{true, true, false, false});
  Tensor b = tensor(std::vector<bool>{true, false, true, false});
  CHECK((a + b).dtype() == kBool);
  CHECK((a + b).to_vector<bool>() == std::vector<bool>{true, true, true, false});
  CHECK((a * b).to_vector<bool>() == std::vector<bool>{true, false, false, false});
  CHECK_THROWS_WITH(a - b, doctest::Contains("sub"));
  CHECK((a + 1).dtype() == kInt64);
  CHECK((a + 1).to_vector<int64_t>() == std::vector<int64_t>{2, 2, 1, 1});
}

TEST_CASE("where selects per element with broadcasting and promotion") {
  manual_seed(7);
  Tensor a = normal({4, 6}), b = normal({6}, kFloat64);
  Tensor cond = a > 0;
  Tensor w = kiln::where(cond, a, b);
  CHECK(w.dtype() == kFloat64);
  auto cv = cond.to_vector<bool>();
  auto av = a.to_vector<double>(), wv = w.to_vector<double>(), bv = b.to_vector<double>();
  for (size_t k = 0; k < cv.size(); ++k) CHECK(wv[k] == (cv[k] ? av[k] : bv[k % 6]));
  Tensor ws = kiln::where(cond, a, 0.0);
  CHECK(ws.dtype() == kFloat32);
  CHECK_ALLCLOSE(ws, kiln::relu(a));
  Tensor ws2 = kiln::where(cond, 1, a);
  CHECK(ws2.dtype() == kFloat32);
  CHECK(kiln::where(tensor(std::vector<bool>{true, false}), 1, tensor(std::vector<int32_t>{5, 6}))
            .to_vector<int32_t>() == std::vector<int32_t>{1, 6});
  // Non-contiguous condition and operands.
  Tensor at = transposed(normal({6, 4}));
  Tensor wt = kiln::where(at > 0, at, -at);
  CHECK_ALLCLOSE(wt, kiln::abs(at));
  CHECK_THROWS_WITH(kiln::where(a, a, b), doctest::Contains("bool"));
}

TEST_CASE("masked_fill keeps the tensor's dtype and broadcasts the mask") {
  Tensor x = tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor mask = tensor(std::vector<bool>{true, false, true});
  Tensor y = kiln::masked_fill(x, mask, -1);
  CHECK(y.dtype() == kInt64);
  CHECK(y.to_vector<int64_t>() == std::vector<int64_t>{-1, 2, -1, -1, 5, -1});
  Tensor f = ones({2, 3}).masked_fill(mask, -INFINITY);
  CHECK(f.to_vector<float>() == std::vector<float>{-INFINITY, 1, -INFINITY, -INFINITY, 1, -INFINITY});
  CHECK(x.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
  CHECK_THROWS_WITH(kiln::masked_fill(x, x, 0), doctest::Contains("masked_fill"));
}

TEST_CASE("in-place arithmetic writes into self and bumps the version") {
  manual_seed(8);
  Tensor x = normal({3, 4});
  Tensor orig = x.clone();
  Tensor b = normal({4});
  void* data = x.data_ptr();
  uint32_t v0 = x.version();
  x.add_(b);
  CHECK(x.data_ptr() == data);
  CHECK(x.version() > v0);
  CHECK_ALLCLOSE(x, ref2(orig, b, [](double p, double q) { return p + q; }));

  Tensor y = orig.clone();
  uint32_t v1 = y.version();
  y.mul_(2.0);
  CHECK(y.version() > v1);
  CHECK_ALLCLOSE(y, ref1(orig, [](double v) { return 2 * v; }));
  y.sub_(orig, 0.5);
  CHECK_ALLCLOSE(y, ref1(orig, [](double v) { return 1.5 * v; }));
  y.div_(orig);
  CHECK_ALLCLOSE(y, full({3, 4}, 1.5));
  y += 0.5;
  y *= orig;
  CHECK_ALLCLOSE(y, ref1(orig, [](double v) { return 2 * v; }));
  y /= 2;
  y -= orig;
  CHECK_ALLCLOSE(y, zeros({3, 4}));
  y.add_(orig, -2);
  CHECK_ALLCLOSE(y, ref1(orig, [](double v) { return -2 * v; }));

  // Writing through a non-contiguous view changes the base.
  Tensor base = zeros({2, 3});
  Tensor view = make_view(base, {3, 2}, {1, 3}, 0);
  view.add_(tensor({1.0, 2.0}));
  CHECK(base.to_vector<float>() == std::vector<float>{1, 1, 1, 2, 2, 2});

  // x += x reads each element before writing it.
  Tensor z = tensor({1.0, 2.0});
  z.add_(z);
  CHECK(z.to_vector<float>() == std::vector<float>{2, 4});

  // Integer tensors take integer and promote-compatible operands.
  Tensor i = tensor(std::vector<int64_t>{1, 2});
  i.mul_(3);
  i.add_(tensor(std::vector<int32_t>{1, 1}));
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{4, 7});
  // f16 self with an f32 operand computes and stays f16.
  Tensor h = ones({3}, kFloat16);
  h.add_(tensor({0.5, 1.0, 2.0}));
  CHECK(h.dtype() == kFloat16);
  CHECK(h.to_vector<float>() == std::vector<float>{1.5f, 2, 3});
}

TEST_CASE("in-place errors: bad casts, shapes that do not fit, leaves requiring grad") {
  Tensor i = tensor(std::vector<int64_t>{1, 2});
  CHECK_THROWS_WITH(i.mul_(2.5), doctest::Contains("can't be cast"));
  CHECK_THROWS_WITH(i.div_(2), doctest::Contains("div_"));
  CHECK_THROWS_WITH(i.add_(tensor({1.0, 2.0})), doctest::Contains("can't be cast"));
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, 2});

  Tensor x = zeros({3});
  CHECK_THROWS_WITH(x.add_(zeros({2, 3})), doctest::Contains("add_"));
  CHECK_THROWS_WITH(x.add_(zeros({2})), doctest::Contains("[2]"));

  Tensor leaf = ones({3});
  leaf.set_requires_grad(true);
  CHECK_THROWS_WITH(leaf.add_(ones({3})), doctest::Contains("leaf"));
  CHECK_THROWS_WITH(leaf.mul_(2), doctest::Contains("mul_"));
  {
    NoGradGuard g;
    leaf.mul_(2);  // allowed outside grad mode, as in an optimizer step
  }
  CHECK(leaf.to_vector<float>() == std::vector<float>{2, 2, 2});
}

/// The message of the kiln::Error `f` throws ("" if none).
template <class F> std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("shape and device errors name the op and both operands") {
  Tensor a = zeros({2, 3}), b = zeros({4});
  for (auto [name, msg] : {std::pair<std::string, std::string>{"add", error_of([&] { return a + b; })},
                           {"mul", error_of([&] { return a * b; })},
                           {"div", error_of([&] { return a / b; })},
                           {"maximum", error_of([&] { return kiln::maximum(a, b); })}}) {
    CAPTURE(msg);
    CHECK(msg.find(name) != std::string::npos);
    CHECK(msg.find("[2, 3]") != std::string::npos);
    CHECK(msg.find("[4]") != std::string::npos);
  }
  CHECK_THROWS_WITH(kiln::where(a > 0, a, b), doctest::Contains("where"));
  CHECK_THROWS_WITH(a < b, doctest::Contains("lt"));
  CHECK_THROWS_WITH(unary_backward(UnaryOp{UnaryKind::relu}, tensor(std::vector<int64_t>{1}),
                                   tensor(std::vector<int64_t>{1})),
                    doctest::Contains("relu backward"));
}

TEST_CASE("empty and 0-dim tensors") {
  Tensor e = zeros({0, 3});
  CHECK((e + ones({3})).sizes() == Shape{0, 3});
  CHECK(kiln::exp(e).sizes() == Shape{0, 3});
  CHECK(kiln::where(e > 0, e, 1.0).sizes() == Shape{0, 3});
  Tensor s = full({}, 2.0);
  Tensor r = kiln::exp(s) * s;
  CHECK(r.dim() == 0);
  CHECK(r.item<double>() == doctest::Approx(2 * std::exp(2.0)));
}
