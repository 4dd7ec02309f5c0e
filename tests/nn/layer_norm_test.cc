// F::layer_norm over several dims against mean / variance normalisation, with its f64 gradcheck.
#include <doctest/doctest.h>

#include <cmath>

#include "nn/nn.h"
#include "tests/testing/compare.h"

using namespace kiln;
namespace F = kiln::nn::functional;

using test::close;

TEST_CASE("layer_norm over two dims matches mean / variance normalization, with gradients") {
  manual_seed(42);
  Tensor x = randn({3, 4, 5}, kFloat64) + 1.0;
  Tensor w = rand({4, 5}, kFloat64) + 0.5, b = rand({4, 5}, kFloat64);
  Tensor c = x - x.mean({1, 2}, true);
  Tensor ref = c * rsqrt((c * c).mean({1, 2}, true) + 1e-5) * w + b;
  CHECK(close(F::layer_norm(x, {4, 5}, w, b, 1e-5), ref, 1e-10));
  std::vector<Tensor> leaves = {x.detach().set_requires_grad(true), w.detach().set_requires_grad(true),
                                b.detach().set_requires_grad(true)};
  auto r = autograd::gradcheck(
      [](const std::vector<Tensor>& v) { return F::layer_norm(v[0], {4, 5}, v[1], v[2], 1e-5); }, leaves);
  CHECK_MESSAGE(r.ok, r.message);
}
