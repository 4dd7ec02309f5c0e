// softmax / log_softmax against f64 formulas over every dim (last-dim rows and strided dims),
// on non-contiguous, large-valued and 16-bit inputs; the backward kernel against its f64 formula.
#include <cmath>
#include <limits>

#include "core/kernels.h"
#include "tests/testing/compare.h"

using namespace kiln;

namespace {

/// Visits every line along `dim` of a row-major `shape`: f(base, stride, n) with flat offsets.
template <class F> void for_each_line(const Shape& shape, int64_t dim, const F& f) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < dim) outer *= shape[d];
    if (d > dim) inner *= shape[d];
  }
  const int64_t n = shape.empty() ? 1 : shape[dim];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) f(o * n * inner + i, inner, n);
}

/// f64 softmax (or log_softmax) of x along dim, straight from the definition exp(x) / sum exp(x)
/// (with the max subtracted, which changes nothing mathematically).
Tensor ref_softmax(const Tensor& x, int64_t dim, bool log) {
  std::vector<double> v = x.to_vector<double>(), out(v.size());
  for_each_line(x.sizes(), dim, [&](int64_t base, int64_t st, int64_t n) {
    double m = -INFINITY;
    for (int64_t k = 0; k < n; ++k) m = std::max(m, v[base + k * st]);
    double s = 0;
    for (int64_t k = 0; k < n; ++k) s += std::exp(v[base + k * st] - m);
    for (int64_t k = 0; k < n; ++k) {
      const double e = v[base + k * st] - m;
      out[base + k * st] = log ? e - std::log(s) : std::exp(e) / s;
    }
  });
  return tensor(out, x.dim() == 0 ? Shape{1} : x.sizes(), kFloat64).reshape(x.sizes());
}

/// f64 backward: softmax gx = y (g - sum g y); log_softmax gx = g - exp(y) sum g.
Tensor ref_backward(const Tensor& g, const Tensor& y, int64_t dim, bool log) {
  std::vector<double> gv = g.to_vector<double>(), yv = y.to_vector<double>(), out(gv.size());
  for_each_line(y.sizes(), dim, [&](int64_t base, int64_t st, int64_t n) {
    double s = 0;
    for (int64_t k = 0; k < n; ++k) s += log ? gv[base + k * st] : gv[base + k * st] * yv[base + k * st];
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = base + k * st;
      out[i] = log ? gv[i] - std::exp(yv[i]) * s : yv[i] * (gv[i] - s);
    }
  });
  return tensor(out, y.sizes(), kFloat64);
}

}  // namespace

TEST_CASE("softmax rows sum to one and match exp(x) / sum exp(x) in f64") {
  for (DType dt : {kFloat32, kFloat64}) {
    const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
    for (const Shape& shape : std::vector<Shape>{{7}, {5, 9}, {3, 4, 6}, {2, 3, 4, 5}, {4, 300}, {130, 3, 70}}) {
      Tensor x = randn(shape, dt) * 3.0;
      for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) {
        CAPTURE(shape);
        CAPTURE(dim);
        Tensor y = softmax(x, dim);
        CHECK(y.dtype() == dt);
        CHECK(y.sizes() == x.sizes());
        CHECK_ALLCLOSE(y, ref_softmax(x, dim, false), tol, tol * 1e-2);
        CHECK_ALLCLOSE(sum(y, {dim}), ones(sum(y, {dim}).sizes(), dt), tol, tol);
        CHECK_ALLCLOSE(log_softmax(x, dim), ref_softmax(x, dim, true), tol, tol);
      }
      // Negative dims mean the same thing.
      CHECK_ALLCLOSE(softmax(x, -1), softmax(x, static_cast<int64_t>(shape.size()) - 1), 0, 0);
    }
  }
}

TEST_CASE("softmax of non-contiguous inputs") {
  Tensor base = randn({6, 10}, kFloat64);
  for (const Tensor& x : {base.t(), base.slice(1, 0, 10, 2), randn({1, 7}, kFloat64).expand({4, 7})})
    for (int64_t dim : {0, 1}) {
      CHECK_ALLCLOSE(softmax(x, dim), ref_softmax(x, dim, false), 1e-12, 1e-14);
      CHECK_ALLCLOSE(x.log_softmax(dim), ref_softmax(x, dim, true), 1e-12, 1e-12);
      CHECK_ALLCLOSE(x.softmax(dim), softmax(x.contiguous(), dim), 1e-15, 0);
    }
}

TEST_CASE("softmax is stable for large values and a 0-dim input") {
  Tensor x = tensor({1000.0f, 1001.0f, 1002.0f, -1000.0f});
  Tensor y = softmax(x, 0);
  for (float v : y.to_vector<float>()) CHECK(std::isfinite(v));
  CHECK_ALLCLOSE(y, ref_softmax(x, 0, false), 1e-5, 1e-7);
  CHECK_ALLCLOSE(log_softmax(x, 0), ref_softmax(x, 0, true), 1e-5, 1e-4);
  // A -inf entry gets probability 0 (log: -inf).
  Tensor z = tensor({-INFINITY, 0.0f, 1.0f});
  CHECK(softmax(z, 0).to_vector<float>()[0] == 0.0f);
  CHECK(log_softmax(z, 0).to_vector<float>()[0] == -INFINITY);
  Tensor s = scalar_tensor(3.0, kFloat32);
  CHECK(softmax(s, 0).item<float>() == 1.0f);
  CHECK(log_softmax(s, -1).item<float>() == 0.0f);
  CHECK(softmax(zeros({0, 4}), 1).sizes() == Shape{0, 4});
}

TEST_CASE("softmax in f16 and bf16 computes in f32") {
  for (DType dt : {kFloat16, kBFloat16}) {
    CAPTURE(dt);
    Tensor x = randn({8, 33}).to(dt);
    for (int64_t dim : {0, 1}) {
      Tensor y = softmax(x, dim);
      CHECK(y.dtype() == dt);
      CHECK_ALLCLOSE(y, ref_softmax(x, dim, false), 1e-2, 1e-3);
      CHECK_ALLCLOSE(log_softmax(x, dim), ref_softmax(x, dim, true), 1e-2, 1e-2);
    }
  }
}

TEST_CASE("softmax errors name the op") {
  CHECK_THROWS_WITH(softmax(randn({2, 3}), 2), doctest::Contains("softmax: dim 2"));
  CHECK_THROWS_WITH(log_softmax(randn({2, 3}), -3), doctest::Contains("log_softmax"));
  CHECK_THROWS_WITH(softmax(arange(4), 0), doctest::Contains("softmax"));
}

TEST_CASE("softmax backward kernel matches its f64 formula") {
  for (bool log : {false, true}) {
    for (DType dt : {kFloat32, kFloat64}) {
      const double tol = dt == kFloat32 ? 1e-5 : 1e-12;
      for (const Shape& shape : std::vector<Shape>{{5, 9}, {3, 4, 6}, {2, 70, 3}}) {
        for (int64_t dim = 0; dim < static_cast<int64_t>(shape.size()); ++dim) {
          CAPTURE(log);
          CAPTURE(shape);
          CAPTURE(dim);
          Tensor x = randn(shape, dt);
          Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
          Tensor g = randn(shape, dt);
          Tensor gx = empty(shape, dt);
          kernels::softmax_backward[kCPU](gx, g, y, dim, log);
          CHECK_ALLCLOSE(gx, ref_backward(g, y, dim, log), tol, tol);
        }
      }
      // A gradient with zero strides (as sum's backward produces) and a transposed one.
      Tensor x = randn({4, 6}, dt);
      Tensor y = log ? log_softmax(x, 1) : softmax(x, 1);
      Tensor ge = randn({1, 6}, dt).expand({4, 6});
      Tensor gx = empty({4, 6}, dt);
      kernels::softmax_backward[kCPU](gx, ge, y, 1, log);
      CHECK_ALLCLOSE(gx, ref_backward(ge, y, 1, log), tol, tol);
      Tensor gt = randn({6, 4}, dt).t();
      kernels::softmax_backward[kCPU](gx, gt, y, 1, log);
      CHECK_ALLCLOSE(gx, ref_backward(gt, y, 1, log), tol, tol);
    }
  }
  // 16-bit: computed in f32.
  Tensor x = randn({3, 17});
  Tensor y = softmax(x, 1).to(kBFloat16);
  Tensor g = randn({3, 17}).to(kBFloat16);
  Tensor gx = empty({3, 17}, kBFloat16);
  kernels::softmax_backward[kCPU](gx, g, y, 1, false);
  CHECK_ALLCLOSE(gx, ref_backward(g, y, 1, false), 1e-2, 1e-2);
}
