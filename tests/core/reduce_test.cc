// Reductions against f64 loops on random inputs: every kind over all / some / negative dims,
// keepdim, non-contiguous and expanded inputs, the multi-threaded paths, dtype rules,
// max/min/argmax with ties and NaN, var/std, logsumexp, and errors that name the op and dim.
#include <cmath>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "core/kernels.h"
#include "core/parallel.h"
#include "tests/testing/compare.h"

using namespace kiln;

namespace {

/// f64 reference: reduces `x` over `dims` (empty = all) with `f`, starting from `init`; the
/// result has the keepdim shape.
Tensor ref_reduce(const Tensor& x, IntList dims, double init, const std::function<double(double, double)>& f,
                  bool mean = false) {
  const int64_t nd = x.dim();
  if (dims.empty())
    for (int64_t d = 0; d < nd; ++d) dims.push_back(d);
  std::vector<bool> red(nd, false);
  for (int64_t d : dims) red[wrap_dim(d, nd, "ref")] = true;
  Shape os = x.sizes();
  int64_t count = 1;
  for (int64_t d = 0; d < nd; ++d)
    if (red[d]) { count *= os[d]; os[d] = 1; }
  std::vector<double> acc(shape_numel(os), init);
  const std::vector<double> xs = x.to_vector<double>();
  const Shape ost = contiguous_strides(os);
  for (int64_t i = 0; i < static_cast<int64_t>(xs.size()); ++i) {
    int64_t rem = i, o = 0;
    for (int64_t d = nd - 1; d >= 0; --d) {
      const int64_t id = rem % x.sizes()[d];
      rem /= x.sizes()[d];
      if (!red[d]) o += id * ost[d];
    }
    acc[o] = f(acc[o], xs[i]);
  }
  if (mean)
    for (double& v : acc) v /= static_cast<double>(count);
  return tensor(acc, os.empty() ? Shape{1} : os, kFloat64).reshape(os);
}

double r_add(double a, double b) { return a + b; }
double r_mul(double a, double b) { return a * b; }
double fmax_nan(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
double fmin_nan(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }

/// Checks sum/mean/prod/amax/amin of x over `dims` (both keepdim settings) against ref_reduce.
void check_all_kinds(const Tensor& x, const IntList& dims, double rtol = 1e-5, double atol = 1e-5) {
  const double inf = std::numeric_limits<double>::infinity();
  struct Case {
    const char* name;
    std::function<Tensor(const Tensor&, const IntList&, bool)> op;
    Tensor ref;
  };
  std::vector<Case> cases = {
      {"sum", [](const Tensor& t, const IntList& d, bool k) { return sum(t, d, k); }, ref_reduce(x, dims, 0, r_add)},
      {"mean", [](const Tensor& t, const IntList& d, bool k) { return mean(t, d, k); },
       ref_reduce(x, dims, 0, r_add, true)},
      {"prod", [](const Tensor& t, const IntList& d, bool k) { return prod(t, d, k); },
       ref_reduce(x, dims, 1, r_mul)},
      {"amax", [](const Tensor& t, const IntList& d, bool k) { return amax(t, d, k); },
       ref_reduce(x, dims, -inf, fmax_nan)},
      {"amin", [](const Tensor& t, const IntList& d, bool k) { return amin(t, d, k); },
       ref_reduce(x, dims, inf, fmin_nan)},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CAPTURE(x.shape_str());
    CAPTURE(dims);
    Tensor kept = c.op(x, dims, true);
    CHECK(kept.dtype() == x.dtype());
    CHECK_ALLCLOSE(kept, c.ref, rtol, atol);
    Tensor dropped = c.op(x, dims, false);
    Shape expect;
    IntList all = dims;
    if (all.empty())
      for (int64_t d = 0; d < x.dim(); ++d) all.push_back(d);
    for (int64_t d = 0; d < x.dim(); ++d) {
      bool r = false;
      for (int64_t e : all) r |= wrap_dim(e, x.dim(), "t") == d;
      if (!r) expect.push_back(x.sizes()[d]);
    }
    CHECK(dropped.sizes() == expect);
    CHECK_ALLCLOSE(dropped, c.ref.reshape(expect), rtol, atol);
  }
}

}  // namespace

TEST_CASE("every reduction matches f64 loops over all, some and negative dims") {
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor x = randn({3, 4, 5}, dt);
    for (const IntList& dims : std::vector<IntList>{{}, {0}, {1}, {2}, {-1}, {0, 2}, {-3, -2}, {1, 2}, {0, 1, 2}})
      check_all_kinds(x, dims);
  }
  check_all_kinds(randn({7}), {});
  check_all_kinds(randn({7}), {0});
  check_all_kinds(randn({2, 1, 3, 1, 4}), {1, 3});
  check_all_kinds(randn({2, 3, 4, 5}), {0, 2});
  check_all_kinds(randn({2, 3, 4, 5}), {1, 3});
}

TEST_CASE("reductions of non-contiguous and expanded inputs") {
  Tensor base = randn({6, 8, 10}, kFloat64);
  Tensor tr = base.transpose(0, 2);                  // [10, 8, 6], innermost kept dim strided
  Tensor sl = base.slice(2, 1, 10, 3);               // [6, 8, 3], step 3
  Tensor perm = base.permute({1, 2, 0});             // [8, 10, 6]
  Tensor ex = randn({1, 5, 1}, kFloat64).expand({4, 5, 3});  // zero strides
  for (const Tensor& x : {tr, sl, perm, ex})
    for (const IntList& dims : std::vector<IntList>{{}, {0}, {1}, {2}, {0, 1}, {1, 2}, {0, 2}})
      check_all_kinds(x, dims);
}

TEST_CASE("large reductions take the multi-threaded paths and stay accurate") {
  // One output over many elements: split across threads.
  Tensor big = randn({1 << 20}, kFloat32);
  CHECK_ALLCLOSE(sum(big), ref_reduce(big, {}, 0, r_add).reshape({}), 1e-5, 1e-3);
  CHECK_ALLCLOSE(amax(big), ref_reduce(big, {}, -INFINITY, fmax_nan).reshape({}));
  CHECK_ALLCLOSE(amin(big), ref_reduce(big, {}, INFINITY, fmin_nan).reshape({}));
  // Few rows, long contiguous reduced runs.
  Tensor wide = randn({3, 300000}, kFloat32);
  CHECK_ALLCLOSE(sum(wide, {1}), ref_reduce(wide, {1}, 0, r_add).reshape({3}), 1e-5, 1e-3);
  CHECK_ALLCLOSE(mean(wide, {1}), ref_reduce(wide, {1}, 0, r_add, true).reshape({3}), 1e-5, 1e-6);
  // Column sums: few kept (contiguous) columns, many rows.
  Tensor tall = randn({200000, 5}, kFloat32);
  CHECK_ALLCLOSE(sum(tall, {0}), ref_reduce(tall, {0}, 0, r_add).reshape({5}), 1e-5, 1e-3);
  CHECK_ALLCLOSE(amax(tall, {0}), ref_reduce(tall, {0}, -INFINITY, fmax_nan).reshape({5}));
  // Few outputs, each made of many contiguous runs (BatchNorm's statistics over N, H, W).
  Tensor bn = randn({50, 3, 2000}, kFloat32);
  CHECK_ALLCLOSE(sum(bn, {0, 2}), ref_reduce(bn, {0, 2}, 0, r_add).reshape({3}), 1e-5, 1e-3);
  CHECK_ALLCLOSE(amin(bn, {0, 2}), ref_reduce(bn, {0, 2}, INFINITY, fmin_nan).reshape({3}));
  Tensor bn_many = randn({8, 64, 7, 7}, kFloat64);
  CHECK_ALLCLOSE(mean(bn_many, {0, 2, 3}), ref_reduce(bn_many, {0, 2, 3}, 0, r_add, true).reshape({64}), 1e-12, 1e-12);
  // Many outputs of both layouts.
  Tensor m = randn({700, 300}, kFloat64);
  CHECK_ALLCLOSE(sum(m, {0}), ref_reduce(m, {0}, 0, r_add).reshape({300}), 1e-9, 1e-9);
  CHECK_ALLCLOSE(sum(m, {1}), ref_reduce(m, {1}, 0, r_add).reshape({700}), 1e-9, 1e-9);
  CHECK_ALLCLOSE(sum(m.t(), {0}), ref_reduce(m, {1}, 0, r_add).reshape({700}), 1e-9, 1e-9);
}

TEST_CASE("reductions give the same bits at 1, 2, 3 and 4 threads (every schedule)") {
  // f64 sums show any change of order; shapes for each schedule: one long output, a few long
  // outputs (below and above 2 x the chunk limit), column sums with 1 and several blocks of
  // columns (rows in 4 chunks, a thread taking consecutive chunks), also with a leading kept dim,
  // BatchNorm-style runs.
  std::vector<std::pair<Shape, IntList>> cases = {
      {{1 << 20}, {}},      {{3, 300000}, {1}}, {{40, 40000}, {1}}, {{200000, 5}, {0}},
      {{1024, 384}, {0}},   {{4096, 1000}, {0}}, {{3, 2000, 700}, {1}}, {{64, 30000}, {0}},
      {{50, 3, 2000}, {0, 2}}};
  for (auto& [shape, dims] : cases) {
    Tensor x = randn(shape, kFloat64);
    auto at = [&](int threads) {
      const int before = get_num_threads();
      set_num_threads(threads);
      std::vector<double> r = sum(x, dims).to_vector<double>();
      std::vector<double> f = sum(x.to(kFloat32), dims).to_vector<double>();
      r.insert(r.end(), f.begin(), f.end());
      set_num_threads(before);
      return r;
    };
    const std::vector<double> one = at(1);
    for (int t : {2, 3, 4}) {
      INFO("shape ", shape_str(shape), " threads ", t);
      CHECK(at(t) == one);
    }
  }
}

TEST_CASE("f32 sums accumulate in more than f32 precision") {
  // 2^24 + 1 cannot be represented in f32; a naive f32 running sum of 2^24 + 4 ones stalls.
  Tensor ones_ = ones({(1 << 24) + 4}, kFloat32);
  CHECK(sum(ones_).item<double>() == static_cast<double>((1 << 24) + 4));
}

TEST_CASE("f16 and bf16 reductions accumulate in f32") {
  for (DType dt : {kFloat16, kBFloat16}) {
    CAPTURE(dt);
    // A running f16 sum of ones stalls at 2048 (bf16 at 256); 4096 is exact in both.
    Tensor o = ones({4096}, dt);
    Tensor s = sum(o);
    CHECK(s.dtype() == dt);
    CHECK(s.item<double>() == 4096.0);
    Tensor x = randn({64, 50}, kFloat32);
    Tensor xh = x.to(dt);
    CHECK_ALLCLOSE(sum(xh, {1}), sum(xh.to(kFloat32), {1}), 1e-2, 1e-2);
    CHECK_ALLCLOSE(mean(xh, {0}), mean(xh.to(kFloat32), {0}), 1e-2, 1e-2);
    CHECK_ALLCLOSE(amax(xh, {1}), amax(xh.to(kFloat32), {1}), 0, 0);
  }
}

TEST_CASE("integer and bool sums give i64; mean of integers is an error naming mean") {
  Tensor xi = tensor(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor s = sum(xi, {1});
  CHECK(s.dtype() == kInt64);
  CHECK(s.to_vector<int64_t>() == std::vector<int64_t>{6, 15});
  CHECK(prod(xi).dtype() == kInt64);
  CHECK(prod(xi).item<int64_t>() == 720);
  CHECK(amax(xi).dtype() == kInt32);
  CHECK(amax(xi, {0}).to_vector<int32_t>() == std::vector<int32_t>{4, 5, 6});
  CHECK(amin(xi, {1}).to_vector<int32_t>() == std::vector<int32_t>{1, 4});
  Tensor xb = tensor(std::vector<bool>{true, false, true, true});
  CHECK(sum(xb).dtype() == kInt64);
  CHECK(sum(xb).item<int64_t>() == 3);
  CHECK_THROWS_WITH(mean(xi), doctest::Contains("mean"));
  CHECK_THROWS_WITH(var(xi), doctest::Contains("var"));
  // Large i64 values are summed exactly.
  Tensor big = full({3}, int64_t{1} << 60, kInt64);
  CHECK(sum(big).item<int64_t>() == 3 * (int64_t{1} << 60));
}

TEST_CASE("i32 and bool reductions and arg-reductions over strided views equal the i64 ones") {
  manual_seed(17);
  Tensor x64 = randint(-1000, 1000, {5, 7, 3});
  Tensor x32 = x64.to(kInt32).transpose(0, 2);  // strided: the reduced dims are not innermost
  Tensor t64 = x64.transpose(0, 2);
  for (const IntList& dims : {IntList{0}, IntList{1}, IntList{0, 2}, IntList{}}) {
    CHECK(amax(x32, dims).dtype() == kInt32);
    CHECK(amax(x32, dims).to(kInt64).to_vector<int64_t>() == amax(t64, dims).to_vector<int64_t>());
    CHECK(amin(x32, dims).to(kInt64).to_vector<int64_t>() == amin(t64, dims).to_vector<int64_t>());
    CHECK(sum(x32, dims).to_vector<int64_t>() == sum(t64, dims).to_vector<int64_t>());
  }
  for (int64_t d : {0, 1, 2}) {
    CHECK(argmax(x32, d).to_vector<int64_t>() == argmax(t64, d).to_vector<int64_t>());
    CHECK(argmin(x32, d).to_vector<int64_t>() == argmin(t64, d).to_vector<int64_t>());
  }
  Tensor b = x64 > Scalar(int64_t{900});
  CHECK(amax(b, {1}).dtype() == kBool);
  CHECK(amax(b, {1}).to(kInt64).to_vector<int64_t>() == amax(b.to(kInt64), {1}).to_vector<int64_t>());
  CHECK(amin(b).item<bool>() == false);
  CHECK_THROWS_WITH(amax(zeros({2, 0}, kInt32), {1}), doctest::Contains("amax"));
}

TEST_CASE("0-dim inputs and empty reductions") {
  Tensor s = scalar_tensor(2.5, kFloat32);
  CHECK(sum(s).sizes() == Shape{});
  CHECK(sum(s).item<double>() == 2.5);
  CHECK(sum(s, {0}).item<double>() == 2.5);
  CHECK(amax(s, {-1}, true).sizes() == Shape{});
  Tensor e = zeros({3, 0});
  CHECK(sum(e, {1}).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(prod(e, {1}).to_vector<float>() == std::vector<float>{1, 1, 1});
  CHECK(std::isnan(mean(e).item<double>()));
  CHECK(sum(e, {0}).sizes() == Shape{0});
  CHECK_THROWS_WITH(amax(e, {1}), doctest::Contains("amax"));
  CHECK_THROWS_WITH(argmax(e), doctest::Contains("argmax"));
}

TEST_CASE("max and min along a dim return values gathered at the first extreme index") {
  Tensor x = randn({4, 6, 5}, kFloat64);
  for (int64_t dim : {0, 1, 2, -1}) {
    for (bool keepdim : {false, true}) {
      auto [vmax, imax] = max(x, dim, keepdim);
      auto [vmin, imin] = min(x, dim, keepdim);
      CHECK(imax.dtype() == kInt64);
      CHECK_ALLCLOSE(vmax, amax(x, {dim}, keepdim), 0, 0);
      CHECK_ALLCLOSE(vmin, amin(x, {dim}, keepdim), 0, 0);
      CHECK(imax.to_vector<int64_t>() == argmax(x, dim, keepdim).to_vector<int64_t>());
      CHECK(imin.to_vector<int64_t>() == argmin(x, dim, keepdim).to_vector<int64_t>());
      const int64_t d = wrap_dim(dim, 3, "test");
      Tensor ik = keepdim ? imax : imax.unsqueeze(d);
      CHECK_ALLCLOSE(x.gather(d, ik).squeeze(d), amax(x, {dim}), 0, 0);
    }
  }
  // Hand-checked values and indices.
  Tensor y = tensor({3, 1, 4, 1, 5, 9, 2, 6}, kFloat32).view({2, 4});
  auto [v, i] = max(y, 1);
  CHECK(v.to_vector<float>() == std::vector<float>{4, 9});
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{2, 1});
  auto [v2, i2] = min(y, 0);
  CHECK(v2.to_vector<float>() == std::vector<float>{3, 1, 2, 1});
  CHECK(i2.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 1, 0});
}

TEST_CASE("argmax and argmin: ties give the first index, no dim means the flattened tensor") {
  Tensor t = tensor({1, 7, 7, 3, 7, 0, 0, 2}, kFloat32).view({2, 4});
  CHECK(argmax(t, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  CHECK(argmin(t, 1).to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(argmax(t).item<int64_t>() == 1);
  CHECK(argmax(t).sizes() == Shape{});
  CHECK(argmin(t).item<int64_t>() == 5);
  CHECK(argmax(t, std::nullopt, true).sizes() == Shape{1, 1});
  CHECK(argmax(t, 0, true).sizes() == Shape{1, 4});
  CHECK(argmax(t, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 0, 0});
  // Flattened order of a non-contiguous tensor is its logical order.
  CHECK(argmax(t.t()).item<int64_t>() == 1);  // t.t() = [[1,7],[7,0],[7,0],[3,2]]: first 7 at flat 1
  // Long ties across thread chunks keep the first index.
  Tensor c = full({1 << 20}, 5.0f);
  CHECK(argmax(c).item<int64_t>() == 0);
  CHECK(argmin(c).item<int64_t>() == 0);
  Tensor r = randn({1 << 20});
  const std::vector<float> rv = r.to_vector<float>();
  int64_t best = 0;
  for (int64_t k = 1; k < static_cast<int64_t>(rv.size()); ++k)
    if (rv[k] > rv[best]) best = k;
  CHECK(argmax(r).item<int64_t>() == best);
  CHECK(Tensor(r).argmax().item<int64_t>() == best);
  // Integers too.
  Tensor ti = tensor(std::vector<int64_t>{4, 9, 9, 1});
  CHECK(argmax(ti).item<int64_t>() == 1);
}

TEST_CASE("NaN propagates through amax/amin and wins argmax") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = tensor(std::vector<float>{1, nan, 3, 4, 5, 6, 7, 8}, {2, 4});
  CHECK(std::isnan(amax(x).item<float>()));
  CHECK(std::isnan(amin(x).item<float>()));
  std::vector<float> m = amax(x, {1}).to_vector<float>();
  CHECK(std::isnan(m[0]));
  CHECK(m[1] == 8);
  CHECK(argmax(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 3});
  CHECK(argmin(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});
  // Column-wise (the row-accumulating path) and a long vectorised run.
  CHECK(std::isnan(amax(x, {0}).to_vector<float>()[1]));
  Tensor big = randn({100003});
  big.narrow(0, 77777, 1).fill_(nan);
  CHECK(std::isnan(amax(big).item<float>()));
  CHECK(std::isnan(amin(big).item<float>()));
  CHECK(argmax(big).item<int64_t>() == 77777);
}

TEST_CASE("var and std match the hand formula with Bessel's correction") {
  Tensor x = randn({5, 7}, kFloat64);
  const std::vector<double> v = x.to_vector<double>();
  for (int64_t corr : {0, 1, 2}) {
    // Over dim 1, by hand.
    std::vector<double> expect;
    for (int i = 0; i < 5; ++i) {
      double mu = 0;
      for (int j = 0; j < 7; ++j) mu += v[i * 7 + j];
      mu /= 7;
      double ss = 0;
      for (int j = 0; j < 7; ++j) ss += (v[i * 7 + j] - mu) * (v[i * 7 + j] - mu);
      expect.push_back(ss / (7 - corr));
    }
    Tensor e = tensor(expect, {5}, kFloat64);
    CHECK_ALLCLOSE(var(x, {1}, corr), e, 1e-12, 1e-12);
    CHECK_ALLCLOSE(x.var({-1}, corr, true), e.view({5, 1}), 1e-12, 1e-12);
    CHECK_ALLCLOSE(x.std({1}, corr), sqrt(e), 1e-12, 1e-12);
  }
  // Over everything.
  double mu = 0, ss = 0;
  for (double a : v) mu += a;
  mu /= 35;
  for (double a : v) ss += (a - mu) * (a - mu);
  CHECK(var(x).item<double>() == doctest::Approx(ss / 34).epsilon(1e-12));
  CHECK(x.std().item<double>() == doctest::Approx(std::sqrt(ss / 34)).epsilon(1e-12));
  CHECK(var(randn({3, 4}), {0, 1}, 1).sizes() == Shape{});
  // A single element with correction 1 divides by zero.
  CHECK(std::isnan(var(tensor({2.0})).item<double>()));
}

TEST_CASE("logsumexp is stable for large and infinite values") {
  Tensor x = randn({4, 9}, kFloat64);
  const std::vector<double> v = x.to_vector<double>();
  std::vector<double> expect;
  for (int i = 0; i < 4; ++i) {
    double s = 0;
    for (int j = 0; j < 9; ++j) s += std::exp(v[i * 9 + j]);
    expect.push_back(std::log(s));
  }
  CHECK_ALLCLOSE(logsumexp(x, {1}), tensor(expect, {4}, kFloat64), 1e-12, 1e-12);
  CHECK_ALLCLOSE(x.logsumexp({-1}, true), tensor(expect, {4, 1}, kFloat64), 1e-12, 1e-12);
  // exp(1000) overflows; the shifted form does not.
  Tensor big = tensor({1000.0f, 1000.0f, 999.0f});
  Tensor l = logsumexp(big, {0});
  CHECK(std::isfinite(l.item<float>()));
  CHECK(l.item<double>() == doctest::Approx(1000.0 + std::log(2.0 + std::exp(-1.0))).epsilon(1e-6));
  const float inf = std::numeric_limits<float>::infinity();
  Tensor ninf = tensor(std::vector<float>{-inf, -inf, 1, 2}, {2, 2});
  std::vector<float> r = logsumexp(ninf, {1}).to_vector<float>();
  CHECK(r[0] == -inf);
  CHECK(r[1] == doctest::Approx(std::log(std::exp(1.0) + std::exp(2.0))));
  Tensor pinf = tensor(std::vector<float>{inf, 0});
  CHECK(logsumexp(pinf, {0}).item<float>() == inf);
}

TEST_CASE("reduction errors name the op and the bad dim") {
  Tensor x = randn({2, 3});
  CHECK_THROWS_WITH(sum(x, {1, 1}), doctest::Contains("sum"));
  CHECK_THROWS_WITH(sum(x, {1, -1}), doctest::Contains("dim 1"));
  CHECK_THROWS_WITH(mean(x, {0, -2}), doctest::Contains("mean"));
  CHECK_THROWS_WITH(sum(x, {2}), doctest::Contains("sum: dim 2 out of range"));
  CHECK_THROWS_WITH(amax(x, {-3}), doctest::Contains("amax: dim -3"));
  CHECK_THROWS_WITH(prod(x, {5}), doctest::Contains("prod"));
  CHECK_THROWS_WITH(argmax(x, 2), doctest::Contains("argmax: dim 2"));
  CHECK_THROWS_WITH(max(x, 4), doctest::Contains("max: dim 4"));
  CHECK_THROWS_WITH(var(x, {0, 0}), doctest::Contains("var"));
  CHECK_THROWS_WITH(logsumexp(x, {3}), doctest::Contains("logsumexp"));
}

TEST_CASE("Tensor methods forward to the free functions") {
  Tensor x = randn({3, 4});
  CHECK_ALLCLOSE(x.sum(), sum(x), 0, 0);
  CHECK_ALLCLOSE(x.sum({1}, true), sum(x, {1}, true), 0, 0);
  CHECK_ALLCLOSE(x.mean(), mean(x), 0, 0);
  CHECK_ALLCLOSE(x.mean({0}), mean(x, {0}), 0, 0);
  CHECK_ALLCLOSE(x.max(), amax(x), 0, 0);
  CHECK_ALLCLOSE(x.min(), amin(x), 0, 0);
  CHECK_ALLCLOSE(x.amax({1}), amax(x, {1}), 0, 0);
  CHECK_ALLCLOSE(x.amin({0}, true), amin(x, {0}, true), 0, 0);
  CHECK(x.argmax().item<int64_t>() == argmax(x).item<int64_t>());
  CHECK(x.argmin(1).to_vector<int64_t>() == argmin(x, 1).to_vector<int64_t>());
}

TEST_CASE("reduce kernel writes through a strided output") {
  Tensor x = randn({4, 5}, kFloat64);
  Tensor buf = zeros({4, 2}, kFloat64);
  Tensor out = buf.narrow(1, 1, 1);  // [4, 1] with stride 2
  kernels::reduce[kCPU](ReduceKind::sum, out, x, {1});
  CHECK_ALLCLOSE(out, sum(x, {1}, true), 1e-12, 1e-12);
  CHECK(buf.select(1, 0).to_vector<double>() == std::vector<double>(4, 0.0));
}
