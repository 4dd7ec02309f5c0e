// scaled_dot_product_attention: argument checks and the causal flag against an explicit mask.
#include "nn/attention.h"

#include <doctest/doctest.h>

#include "core/ops.h"

namespace F = kiln::nn::functional;
using namespace kiln;

TEST_CASE("sdpa: causal equals a lower-triangular boolean mask and an additive -inf mask") {
  manual_seed(3);
  Tensor q = randn({2, 3, 5, 4}), k = randn({2, 3, 5, 4}), v = randn({2, 3, 5, 6});
  Tensor causal = F::scaled_dot_product_attention(q, k, v, {.causal = true});
  CHECK(causal.shape() == Shape{2, 3, 5, 6});
  Tensor keep = ones({5, 5}, kBool).tril();
  Tensor by_bool = F::scaled_dot_product_attention(q, k, v, {.attn_mask = keep});
  Tensor additive = zeros({5, 5}).masked_fill(ones({5, 5}, kBool).triu(1), -INFINITY);
  Tensor by_add = F::scaled_dot_product_attention(q, k, v, {.attn_mask = additive});
  CHECK((causal - by_bool).abs().max().item<double>() < 1e-6);
  CHECK((causal - by_add).abs().max().item<double>() < 1e-6);
  // The first query sees only the first key: its output is v's first row.
  CHECK((causal.slice(2, 0, 1) - v.slice(2, 0, 1)).abs().max().item<double>() < 1e-6);
}

TEST_CASE("sdpa: bad arguments name the op and the values") {
  Tensor q = randn({1, 1, 4, 8}), k = randn({1, 1, 4, 7});
  CHECK_THROWS_WITH(F::scaled_dot_product_attention(q, k, k), doctest::Contains("q's last dim 8 != k's 7"));
  CHECK_THROWS_WITH(F::scaled_dot_product_attention(q, q, q, {.dropout_p = 1.0}),
                    doctest::Contains("dropout_p must be in [0, 1), got 1"));
}
