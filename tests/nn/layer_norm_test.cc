// F::layer_norm over several dims against mean / variance normalisation (its gradients: the op
// database's "layer_norm over 2 dims" row).
#include <doctest/doctest.h>

#include <cmath>

#include "nn/nn.h"
#include "tests/testing/compare.h"

using namespace kiln;
namespace F = kiln::nn::functional;

using test::close;

TEST_CASE("layer_norm over two dims matches mean / variance normalization") {
  manual_seed(42);
  Tensor x = randn({3, 4, 5}, kFloat64) + 1.0;
  Tensor w = rand({4, 5}, kFloat64) + 0.5, b = rand({4, 5}, kFloat64);
  Tensor c = x - x.mean({1, 2}, true);
  Tensor ref = c * rsqrt((c * c).mean({1, 2}, true) + 1e-5) * w + b;
  CHECK(close(F::layer_norm(x, {4, 5}, w, b, 1e-5), ref, 1e-10));
}
