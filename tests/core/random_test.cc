// Random fills: seeded reproducibility, ranges and moments, and independence from the thread
// count (element i always draws from Philox counter offset + i).
#include <cmath>

#include "core/kernels.h"
#include "core/parallel.h"
#include "tests/testing/compare.h"

using namespace kiln;

namespace {
double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}
double std_of(const std::vector<double>& v) {
  double m = mean_of(v), s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size() - 1));
}
}  // namespace

TEST_CASE("manual_seed makes the numbers repeat; the generator moves on otherwise") {
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    manual_seed(42);
    auto a = rand({1000}, dt).to_vector<double>();
    auto b = randn({1000}, dt).to_vector<double>();
    auto c = randint(-5, 5, {1000}).to_vector<double>();
    manual_seed(42);
    CHECK(rand({1000}, dt).to_vector<double>() == a);
    CHECK(randn({1000}, dt).to_vector<double>() == b);
    CHECK(randint(-5, 5, {1000}).to_vector<double>() == c);
    CHECK(rand({1000}, dt).to_vector<double>() != a);
  }
  Generator g1(7), g2(7);
  CHECK(randn({100}, {}, &g1).to_vector<float>() == randn({100}, {}, &g2).to_vector<float>());
}

TEST_CASE("element i draws from Philox counter offset + i") {
  manual_seed(5);
  auto first = rand({100}, kFloat64).to_vector<double>();
  auto second = rand({37}, kFloat64).to_vector<double>();
  auto expected = [](uint64_t counter) {
    auto w = philox4x32(5, counter);
    return static_cast<double>((static_cast<uint64_t>(w[0]) << 32 | w[1]) >> 11) * 0x1.0p-53;
  };
  for (uint64_t i = 0; i < 100; ++i) CHECK(first[i] == expected(i));
  for (uint64_t i = 0; i < 37; ++i) CHECK(second[i] == expected(100 + i));
  CHECK(default_generator().state().offset == 137);
}

TEST_CASE("rand is uniform on [0, 1)") {
  manual_seed(1);
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    auto v = rand({100000}, dt).to_vector<double>();
    for (double x : v) {
      REQUIRE(x >= 0.0);
      REQUIRE(x < 1.0);
    }
    CHECK(mean_of(v) == doctest::Approx(0.5).epsilon(0.01));
    CHECK(std_of(v) == doctest::Approx(std::sqrt(1.0 / 12)).epsilon(0.02));
  }
}

TEST_CASE("randn has mean 0 and std 1") {
  manual_seed(2);
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    auto v = randn({100000}, dt).to_vector<double>();
    CHECK(std::fabs(mean_of(v)) < 0.02);
    CHECK(std_of(v) == doctest::Approx(1.0).epsilon(0.02));
    // The tails are there: about 4.6% of samples beyond 2 sigma.
    int beyond = 0;
    for (double x : v) beyond += std::fabs(x) > 2;
    CHECK(beyond / 100000.0 == doctest::Approx(0.0455).epsilon(0.1));
  }
}

TEST_CASE("randint covers [low, high) and nothing else") {
  manual_seed(3);
  auto v = randint(-3, 4, {70000}).to_vector<int64_t>();
  std::vector<int> counts(7, 0);
  for (int64_t x : v) {
    REQUIRE(x >= -3);
    REQUIRE(x < 4);
    ++counts[x + 3];
  }
  for (int c : counts) CHECK(c == doctest::Approx(10000).epsilon(0.05));
  Tensor i32 = randint(0, 10, {100}, kInt32);
  CHECK(i32.dtype() == kInt32);
  Tensor wide = randint(0, int64_t{1} << 40, {1000});
  CHECK(wide.to_vector<double>() != std::vector<double>(1000, 0.0));
  CHECK(mean_of(wide.to_vector<double>()) == doctest::Approx(std::ldexp(1.0, 39)).epsilon(0.1));
}

TEST_CASE("bernoulli fills 1 with probability p") {
  manual_seed(4);
  Tensor t = empty({100000});
  t.bernoulli_(0.3);
  CHECK(mean_of(t.to_vector<double>()) == doctest::Approx(0.3).epsilon(0.02));
  Tensor b = empty({1000}, kBool);
  b.bernoulli_(1.0);
  for (bool x : b.to_vector<bool>()) CHECK(x);
}

TEST_CASE("the numbers do not depend on the thread count") {
  int saved = get_num_threads();
  auto draw = [](int threads) {
    set_num_threads(threads);
    manual_seed(9);
    std::vector<std::vector<double>> out;
    out.push_back(rand({200001}).to_vector<double>());
    out.push_back(randn({200001}, kFloat64).to_vector<double>());
    out.push_back(randn({100001}, kFloat16).to_vector<double>());
    out.push_back(randn({100001}, kFloat32).to_vector<double>());
    out.push_back(randn({100001}, kBFloat16).to_vector<double>());
    out.push_back(randint(0, 1000, {200001}).to_vector<double>());
    return out;
  };
  // 3 threads split 100,001 elements at indices no block size divides: an element then sits at
  // another place of its thread's range than with 1, 2 or 4 threads.
  auto one = draw(1), two = draw(2), three = draw(3), four = draw(4);
  set_num_threads(saved);
  CHECK(one == two);
  CHECK(one == three);
  CHECK(one == four);
}

TEST_CASE("random fills: a strided view is filled in place, its neighbours untouched; bad arguments name the op") {
  manual_seed(12);
  Tensor base = zeros({4, 4});
  Tensor col = base.slice(1, 1, 2);  // one column: not contiguous
  col.uniform_(2.0, 3.0);
  auto v = base.to_vector<double>();
  for (int64_t i = 0; i < 16; ++i) {
    if (i % 4 == 1) CHECK((v[i] >= 2.0 && v[i] < 3.0));
    else CHECK(v[i] == 0.0);
  }
  Tensor n = zeros({3, 1000}).transpose(0, 1);
  n.normal_(5.0, 0.5);
  CHECK(mean_of(n.contiguous().to_vector<double>()) == doctest::Approx(5.0).epsilon(0.02));
  Tensor ints = zeros({10}, kInt32);
  CHECK_THROWS_WITH(ints.uniform_(), doctest::Contains("uniform_: dtype i32 is not supported"));
  CHECK_THROWS_WITH(base.uniform_(1.0, 0.0), doctest::Contains("low 1 must not exceed high 0"));
  CHECK_THROWS_WITH(base.normal_(0.0, -1.0), doctest::Contains("std must be non-negative, got -1"));
  CHECK_THROWS_WITH(base.bernoulli_(1.5), doctest::Contains("bernoulli_: probability must be in [0, 1], got 1.5"));
  CHECK_THROWS_WITH(randint(0, int64_t{1} << 40, {4}, kInt32), doctest::Contains("does not fit dtype i32"));
  Tensor w = zeros({3}, TensorOptions().requires_grad());
  CHECK_THROWS_WITH(w.uniform_(), doctest::Contains("requires grad while recording"));
  {
    NoGradGuard g;
    w.uniform_(1.0, 2.0);
  }
  CHECK(w.sum().item<double>() >= 3.0);
}
