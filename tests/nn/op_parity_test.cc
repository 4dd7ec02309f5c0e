// Every row of the op-parity table (tests/parity/op_cases.h) on the CPU: gradients in f64 against
// finite differences, the f32 result against the f64 one, and non-contiguous inputs against
// contiguous ones (forward and gradients).
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/gradcheck.h"
#include "core/grad_mode.h"
#include "tests/parity/op_cases.h"

using namespace kiln;

namespace {

bool close(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (a.sizes() != b.sizes()) return false;
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i)
    if (!(std::fabs(x[i] - y[i]) <= atol + rtol * std::fabs(y[i]))) return false;
  return true;
}

/// The same values in a non-contiguous layout: a strided view of a larger buffer.
Tensor non_contiguous(const Tensor& t) {
  Shape wide = t.sizes();
  if (wide.empty()) return t;
  wide.back() *= 2;
  Tensor buf = zeros(wide, t.dtype());
  Tensor v = buf.slice(-1, 0, wide.back(), 2);
  {
    NoGradGuard g;
    v.copy_(t);
  }
  return v;
}

std::vector<Tensor> grads_of(const kiln::test::OpCase& c, std::vector<Tensor> in) {
  for (Tensor& t : in) t.set_requires_grad(true);
  Tensor y = c.fn(in);
  Generator g(7);
  Tensor w = rand(y.sizes(), kFloat64, &g).to(y.dtype());
  if (y.requires_grad()) (y * w).sum().backward();
  std::vector<Tensor> out;
  for (const Tensor& t : in) out.push_back(t.grad().defined() ? t.grad() : zeros_like(t));
  return out;
}

}  // namespace

TEST_CASE("op parity table on the CPU: f64 gradients, f32 vs f64, non-contiguous inputs") {
  const auto& cases = kiln::test::op_cases();
  REQUIRE(cases.size() >= 50);
  uint64_t seed = 1;
  for (const auto& c : cases) {
    CAPTURE(c.name);
    ++seed;
    std::vector<Tensor> x64 = kiln::test::make_inputs(c, kFloat64, seed);
    std::vector<Tensor> leaves;
    for (const Tensor& t : x64) leaves.push_back(t.clone().set_requires_grad(true));
    auto r = autograd::gradcheck(c.fn, leaves);
    CHECK_MESSAGE(r.ok, r.message);

    Tensor y64 = c.fn(x64);
    Tensor y32 = c.fn(kiln::test::make_inputs(c, kFloat32, seed));
    CHECK(y32.dtype() == kFloat32);
    CHECK_MESSAGE(close(y32, y64, c.f32_tol, c.f32_tol), "f32 ", y32.str(), "\nvs f64 ", y64.str());

    std::vector<Tensor> strided;
    for (const Tensor& t : x64) strided.push_back(non_contiguous(t));
    CHECK(close(c.fn(strided), y64, 1e-12, 1e-12));
    auto g_contig = grads_of(c, x64), g_strided = grads_of(c, strided);
    for (size_t i = 0; i < g_contig.size(); ++i) CHECK(close(g_strided[i], g_contig[i], 1e-12, 1e-12));
  }
}
