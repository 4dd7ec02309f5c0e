// Initialisation schemes: bounds and spreads as torch.nn.init computes them.
#include <doctest/doctest.h>

#include <cmath>

#include "nn/nn.h"

using namespace kiln;

TEST_CASE("fans and gains") {
  Tensor w = empty({16, 8, 3, 3});
  auto [in, out] = nn::init::fans(w);
  CHECK(in == 72);
  CHECK(out == 144);
  CHECK(nn::init::calculate_gain("relu") == doctest::Approx(std::sqrt(2.0)));
  CHECK_THROWS_WITH(nn::init::calculate_gain("nope"), doctest::Contains("nope"));
  Tensor v = empty({3});
  CHECK_THROWS_WITH(nn::init::fans(v), doctest::Contains("[3]"));
}

TEST_CASE("uniform and normal schemes have the expected bound and spread") {
  manual_seed(3);
  Tensor w = empty({256, 512});
  nn::init::xavier_uniform_(w);
  double a = std::sqrt(6.0 / (256 + 512));
  CHECK(w.abs().max().item<double>() <= a + 1e-6);
  CHECK(w.abs().max().item<double>() > 0.95 * a);
  nn::init::kaiming_normal_(w, 0.0, nn::init::FanMode::fan_in, "relu");
  CHECK(w.std().item<double>() == doctest::Approx(std::sqrt(2.0 / 512)).epsilon(0.02));
  nn::init::kaiming_uniform_(w, std::sqrt(5.0));
  CHECK(w.abs().max().item<double>() <= 1.0 / std::sqrt(512.0) + 1e-6);
  nn::init::xavier_normal_(w, 2.0);
  CHECK(w.std().item<double>() == doctest::Approx(2.0 * std::sqrt(2.0 / (256 + 512))).epsilon(0.02));
  nn::init::constant_(w, 0.5);
  CHECK(w.mean().item<double>() == 0.5);
}
