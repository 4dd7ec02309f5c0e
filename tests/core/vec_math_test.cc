// The vector math of the hand-vectorised f32 kernels (core/cpu/vec8.h, core/cpu/gelu_tanh_vec.h)
// against f64: exp over its whole range and at its edges, gelu(tanh) and its gradient also where
// 1 + tanh cancels and where the gradient's factors overflow; the AVX-512 unit's 16-lane gelu
// against the 8-lane one, bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu/gelu_tanh_vec.h"
#include "core/cpu/isa.h"
#include "core/cpu/vec8.h"

using namespace kiln::cpu;

namespace {

/// vec::exp of each of xs (in groups of 8).
std::vector<float> vexp(const std::vector<float>& xs) {
  std::vector<float> out(xs.size());
  for (size_t i = 0; i < xs.size(); i += vec::kW) {
    const int64_t n = std::min<int64_t>(vec::kW, static_cast<int64_t>(xs.size() - i));
    vec::store_tail(out.data() + i, vec::exp(vec::load_tail(xs.data() + i, n, 0.0f)), n);
  }
  return out;
}

double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

double gelu_tanh_grad_ref(double x) {
  const double c = std::sqrt(2 / M_PI), k = 0.044715, t = std::tanh(c * (x + k * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * k * x * x);
}

}  // namespace

TEST_CASE("vec::exp is within 3 ulp of exp over the normal range") {
  std::vector<float> xs;
  for (double x = -87.3; x < 88.7; x += 0.00037) xs.push_back(static_cast<float>(x));
  const std::vector<float> y = vexp(xs);
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double ref = std::exp(static_cast<double>(xs[i]));
    worst = std::max(worst, std::fabs(y[i] - ref) / ref);
  }
  MESSAGE("largest relative error ", worst);
  CHECK(worst < 3 * 1.2e-7);
}

TEST_CASE("vec::exp at its edges: 0 and 1 exactly, 0 below the normal range, inf above it, NaN kept") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> y = vexp({0.0f, -inf, inf, nan, -88.0f, -1000.0f, 88.72f, 89.0f, 1000.0f, -87.3f});
  CHECK(y[0] == 1.0f);
  CHECK(y[1] == 0.0f);
  CHECK(y[2] == inf);
  CHECK(std::isnan(y[3]));
  CHECK(y[4] == 0.0f);  // exp(-88) is a denormal: flushed
  CHECK(y[5] == 0.0f);
  CHECK(std::isfinite(y[6]));
  CHECK(y[6] == doctest::Approx(std::exp(88.72)).epsilon(1e-5));
  CHECK(y[7] == inf);
  CHECK(y[8] == inf);
  CHECK(y[9] == doctest::Approx(std::exp(-87.3)).epsilon(1e-6));
}

TEST_CASE("f32 gelu(tanh) and its gradient match f64 from -1000 to 1000, with no NaN or inf") {
  std::vector<float> xs;
  for (double x = -12; x <= 12; x += 0.0013) xs.push_back(static_cast<float>(x));
  for (float x : {-1000.0f, -100.0f, -30.0f, 30.0f, 100.0f, 1000.0f, 0.0f}) xs.push_back(x);
  const int64_t n = static_cast<int64_t>(xs.size());
  std::vector<float> y(n), gy(n, 1.0f), gx(n);
  gelu_tanh_f32(y.data(), xs.data(), n);
  gelu_tanh_backward_f32(gx.data(), gy.data(), xs.data(), n);
  int bad_forward = 0, bad_grad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = xs[i], ref = gelu_tanh_ref(x), gref = gelu_tanh_grad_ref(x);
    // Relative 1e-5 where 1 + tanh does not cancel away the value, else 1e-6 absolute (f32 inputs
    // below -5 give results under 1e-5 in magnitude).
    if (!std::isfinite(y[i]) || std::fabs(y[i] - ref) > 1e-6 + 1e-5 * std::fabs(ref)) ++bad_forward;
    if (!std::isfinite(gx[i]) || std::fabs(gx[i] - gref) > 1e-6 + 1e-5 * std::fabs(gref)) ++bad_grad;
  }
  CHECK(bad_forward == 0);
  CHECK(bad_grad == 0);
  // The tails: gelu(x) -> x above, -> 0 below, the gradient -> 1 and 0.
  CHECK(y[n - 2] == 1000.0f);
  CHECK(y[n - 7] == 0.0f);
  CHECK(gx[n - 2] == 1.0f);
  CHECK(std::fabs(gx[n - 7]) < 1e-20);
}

TEST_CASE("the AVX-512 gelu(tanh) loops give the 8-lane loops' bits, tails and edges included") {
  if (!use_avx512()) {
    MESSAGE("SKIPPED: this CPU has no AVX-512 (or KILN_CPU_ISA says otherwise): only the 8-lane loops run here");
    return;
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n : {1, 7, 8, 15, 16, 17, 31, 1000, 4099}) {
    std::vector<float> xs(n), g(n);
    for (int64_t i = 0; i < n; ++i) xs[i] = normal(rng), g[i] = normal(rng);
    const float edges[] = {0.0f, -0.0f, inf, -inf, nan, -9.5f, 1000.0f, -1000.0f, 1e-30f};
    for (int64_t i = 0; i < std::min<int64_t>(n, 9); ++i) xs[(i * 977) % n] = edges[i];
    std::vector<float> y8(n), y16(n), d8(n), d16(n);
    gelu_tanh_f32(y8.data(), xs.data(), n);
    gelu_tanh_f32_avx512(y16.data(), xs.data(), n);
    gelu_tanh_backward_f32(d8.data(), g.data(), xs.data(), n);
    gelu_tanh_backward_f32_avx512(d16.data(), g.data(), xs.data(), n);
    int differ = 0;
    for (int64_t i = 0; i < n; ++i) {
      differ += std::memcmp(&y8[i], &y16[i], sizeof(float)) != 0;
      differ += std::memcmp(&d8[i], &d16[i], sizeof(float)) != 0;
    }
    INFO("n = ", n);
    CHECK(differ == 0);
  }
}
