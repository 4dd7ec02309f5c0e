// Each layer's forward against reference values, and its gradients by gradcheck (f64).
#include <doctest/doctest.h>

#include <cmath>

#include "nn/nn.h"
#include "tests/testing/compare.h"

using namespace kiln;
using kiln::test::close;
using autograd::gradcheck;

namespace {

/// Gradcheck of a module's output w.r.t. its input and all its parameters.
void check_module_grads(nn::Module& m, const Tensor& x) {
  m.to(kFloat64);
  std::vector<Tensor> inputs{x};
  for (Tensor p : m.parameters()) inputs.push_back(p);
  auto r = gradcheck([&](const std::vector<Tensor>& v) { return m(v[0]); }, inputs);
  CHECK_MESSAGE(r.ok, m.type_name(), ": ", r.message);
}

Tensor input(const Shape& s) { return randn(s, kFloat64).set_requires_grad(true); }

}  // namespace

TEST_CASE("Linear computes x W^T + b and has PyTorch's init bounds") {
  manual_seed(1);
  nn::Linear lin(3, 2);
  for (float v : lin.weight.to_vector<float>()) CHECK(std::fabs(v) <= 1.0f / std::sqrt(3.0f) + 1e-6f);
  lin.to(kFloat64);
  Tensor x = randn({4, 3}, kFloat64);
  auto w = lin.weight.to_vector<double>(), b = lin.bias.to_vector<double>(), xv = x.to_vector<double>();
  auto y = lin(x).to_vector<double>();
  for (int i = 0; i < 4; ++i)
    for (int o = 0; o < 2; ++o) {
      double ref = b[o];
      for (int k = 0; k < 3; ++k) ref += xv[i * 3 + k] * w[o * 3 + k];
      CHECK(y[i * 2 + o] == doctest::Approx(ref).epsilon(1e-12));
    }
  check_module_grads(lin, input({4, 3}));
  nn::Linear batched(3, 2);
  check_module_grads(batched, input({2, 2, 3}));
}

TEST_CASE("Conv2d matches a direct convolution and its gradients check") {
  manual_seed(2);
  nn::Conv2d conv(2, 3, {3, 3}, {.stride = {2, 2}, .padding = {1, 1}});
  conv.to(kFloat64);
  Tensor x = randn({1, 2, 5, 5}, kFloat64);
  Tensor y = conv(x);
  CHECK(y.sizes() == Shape{1, 3, 3, 3});
  auto xv = x.to_vector<double>(), wv = conv.weight.to_vector<double>(), bv = conv.bias.to_vector<double>();
  auto yv = y.to_vector<double>();
  for (int o = 0; o < 3; ++o)
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        double ref = bv[o];
        for (int c = 0; c < 2; ++c)
          for (int a = 0; a < 3; ++a)
            for (int b = 0; b < 3; ++b) {
              int r = i * 2 - 1 + a, s = j * 2 - 1 + b;
              if (r < 0 || r >= 5 || s < 0 || s >= 5) continue;
              ref += xv[(c * 5 + r) * 5 + s] * wv[((o * 2 + c) * 3 + a) * 3 + b];
            }
        CHECK(yv[(o * 3 + i) * 3 + j] == doctest::Approx(ref).epsilon(1e-12));
      }
  check_module_grads(conv, input({2, 2, 5, 5}));
}

TEST_CASE("pooling layers") {
  manual_seed(3);
  Tensor x = tensor(std::vector<double>{1, 5, 2, 0, 3, 4, 8, 7, 6, 9, 1, 2, 0, 1, 3, 4}, {1, 1, 4, 4});
  nn::MaxPool2d mp({2, 2});
  CHECK(mp(x).to_vector<double>() == std::vector<double>{5, 8, 9, 4});
  nn::AvgPool2d ap({2, 2});
  CHECK(ap(x).to_vector<double>() == std::vector<double>{13.0 / 4, 17.0 / 4, 16.0 / 4, 10.0 / 4});
  nn::AdaptiveAvgPool2d gap({1, 1});
  CHECK(gap(x).item<double>() == doctest::Approx(56.0 / 16));
  check_module_grads(mp, input({2, 2, 4, 4}));
  check_module_grads(ap, input({2, 2, 4, 4}));
  check_module_grads(gap, input({2, 2, 3, 3}));
}

TEST_CASE("BatchNorm normalises with batch statistics, tracks running ones, and uses them in eval") {
  manual_seed(4);
  nn::BatchNorm1d bn(3);
  bn.to(kFloat64);
  Tensor x = randn({8, 3}, kFloat64) * 2.0 + 1.0;
  Tensor y = bn(x);
  auto mean = y.mean({0}).to_vector<double>();
  auto var = y.var({0}, /*correction=*/0).to_vector<double>();
  for (int c = 0; c < 3; ++c) {
    CHECK(mean[c] == doctest::Approx(0.0).epsilon(1e-9));
    CHECK(var[c] == doctest::Approx(1.0).epsilon(1e-3));
  }
  // running = 0.9 * init + 0.1 * batch statistic (unbiased variance)
  CHECK(close(bn.running_mean, x.mean({0}) * 0.1));
  CHECK(close(bn.running_var, x.var({0}) * 0.1 + 0.9));
  CHECK(bn.num_batches_tracked.item<int64_t>() == 1);
  bn.eval();
  Tensor e = bn(x);
  CHECK(close(e, (x - bn.running_mean) / sqrt(bn.running_var + 1e-5)));
  bn.train();
  check_module_grads(bn, input({6, 3}));
  nn::BatchNorm2d bn2(2);
  check_module_grads(bn2, input({3, 2, 2, 2}));
  CHECK_THROWS_WITH(bn2(randn({3, 5, 2, 2})), doctest::Contains("BatchNorm2d"));
}

TEST_CASE("LayerNorm normalises the last dims") {
  manual_seed(5);
  nn::LayerNorm ln({4});
  ln.to(kFloat64);
  Tensor x = randn({3, 4}, kFloat64) * 3.0;
  Tensor y = ln(x);
  for (double m : y.mean({1}).to_vector<double>()) CHECK(m == doctest::Approx(0.0).epsilon(1e-9));
  check_module_grads(ln, input({3, 4}));
}

TEST_CASE("Embedding looks rows up and keeps the padding row's gradient at zero") {
  manual_seed(6);
  nn::Embedding emb(5, 3, /*padding_idx=*/0);
  emb.to(kFloat64);
  Tensor idx = tensor(std::vector<int64_t>{1, 0, 4, 1}, {2, 2});
  Tensor y = emb(idx);
  CHECK(y.sizes() == Shape{2, 2, 3});
  CHECK(close(y[0][0], emb.weight[1]));
  y.sum().backward();
  auto g = emb.weight.grad().to_vector<double>();
  CHECK(g[0] == 0.0);
  CHECK(g[3] == 2.0);  // row 1 used twice
  // Away from the padding row the gradient is exact (the padding row's is zero by design).
  std::vector<Tensor> ins{emb.weight};
  emb.weight.set_grad(Tensor());
  Tensor no_pad = tensor(std::vector<int64_t>{1, 3, 4, 1}, {2, 2});
  auto r = gradcheck([&](const std::vector<Tensor>&) { return emb(no_pad); }, ins);
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("Embedding's padding row is looked up as stored, as in PyTorch, and a negative padding_idx counts from the end") {
  manual_seed(6);
  nn::Embedding emb(5, 2, /*padding_idx=*/-1);
  CHECK(emb.padding_idx == 4);
  CHECK(emb.weight[4].to_vector<float>() == std::vector<float>{0, 0});
  {
    NoGradGuard g;
    emb.weight[4].fill_(3.0);  // e.g. loaded from a checkpoint
  }
  Tensor idx = tensor(std::vector<int64_t>{4, 1, 4});
  Tensor y = emb(idx);
  CHECK(y[0].to_vector<float>() == std::vector<float>{3, 3});
  (y * 2.0).sum().backward();
  CHECK(emb.weight.grad()[4].to_vector<float>() == std::vector<float>{0, 0});
  CHECK(emb.weight.grad()[1].to_vector<float>() == std::vector<float>{2, 2});
  // The functional form: same rule, same normalisation, a clear error out of range.
  Tensor w = randn({5, 2}, kFloat64).set_requires_grad(true);
  nn::functional::embedding(idx, w, -1).sum().backward();
  CHECK(w.grad()[4].to_vector<double>() == std::vector<double>{0, 0});
  CHECK(close(nn::functional::embedding(idx, w, -1), nn::functional::embedding(idx, w, 4)));
  CHECK_THROWS_WITH(nn::functional::embedding(idx, w, -6), doctest::Contains("padding_idx -6"));
  CHECK_THROWS_WITH(nn::Embedding(5, 2, 5), doctest::Contains("padding_idx 5"));
}

TEST_CASE("Dropout zeroes about p of the elements in training and nothing in eval") {
  manual_seed(7);
  nn::Dropout drop(0.25);
  Tensor x = ones({100000});
  Tensor y = drop(x);
  auto v = y.to_vector<float>();
  int64_t zeros_count = 0;
  for (float e : v) {
    if (e == 0) ++zeros_count;
    else CHECK(e == doctest::Approx(1.0f / 0.75f));
  }
  CHECK(zeros_count > 24000);
  CHECK(zeros_count < 26000);
  drop.eval();
  CHECK(drop(x).to_vector<float>() == x.to_vector<float>());
}

TEST_CASE("parameterised activation modules match F:: and hand-computed values, with gradients") {
  namespace F = nn::functional;
  Tensor x = tensor({-4.0, -1.0, 0.5, 3.5}, kFloat64);
  auto vals = [](const Tensor& t) { return t.to_vector<double>(); };
  // Softplus(beta=2, threshold=5): x itself where 2x > 5.
  auto sp = vals(nn::Softplus(2, 5)(x));
  CHECK(sp[0] == doctest::Approx(std::log1p(std::exp(-8.0)) / 2));
  CHECK(sp[2] == doctest::Approx(std::log1p(std::exp(1.0)) / 2));
  CHECK(sp[3] == 3.5);
  CHECK(vals(nn::LeakyReLU(0.2)(x)) == std::vector<double>{-0.8, -0.2, 0.5, 3.5});
  auto elu = vals(nn::ELU(2)(x));
  CHECK(elu[1] == doctest::Approx(2 * (std::exp(-1.0) - 1)));
  CHECK(elu[3] == 3.5);
  CHECK(vals(nn::Hardtanh(-2, 1)(x)) == std::vector<double>{-2, -1, 0.5, 1});
  auto hs = vals(nn::Hardswish()(x));
  CHECK(hs[0] == 0.0);
  CHECK(hs[1] == doctest::Approx(-1.0 * 2 / 6));
  CHECK(hs[3] == 3.5);
  const double t = vals(nn::GELU("tanh")(tensor({1.0}, kFloat64)))[0];
  CHECK(t == doctest::Approx(0.5 * (1 + std::tanh(std::sqrt(2 / M_PI) * 1.044715))).epsilon(1e-12));
  CHECK(close(nn::GELU("tanh")(x), F::gelu(x, "tanh")));
  CHECK(close(nn::Softplus()(x), F::softplus(x)));
  CHECK(close(nn::Identity()(x), x));
  CHECK(nn::GELU("tanh").extra_repr() == "approximate='tanh'");
  CHECK(nn::LeakyReLU(0.2).extra_repr() == "negative_slope=0.2");
  CHECK_THROWS_WITH(nn::GELU("fast"), doctest::Contains("approximate"));
  CHECK_THROWS_WITH(nn::Hardtanh(1, -1), doctest::Contains("min_val"));
  manual_seed(9);
  nn::Softplus m1(1.5, 2);
  nn::LeakyReLU m2(0.3);
  nn::ELU m3(0.7);
  nn::Hardtanh m4(-0.8, 0.9);
  nn::Hardswish m5;
  nn::GELU m6("tanh");
  for (nn::Module* m : std::vector<nn::Module*>{&m1, &m2, &m3, &m4, &m5, &m6}) check_module_grads(*m, input({3, 4}));
}

TEST_CASE("activations and Flatten") {
  manual_seed(8);
  Tensor x = randn({2, 3, 2}, kFloat64);
  CHECK(close(nn::ReLU()(x), x.relu()));
  CHECK(close(nn::Tanh()(x), x.tanh()));
  CHECK(close(nn::Sigmoid()(x), (-x).exp().add_(1.0).pow(-1.0)));
  CHECK(close(nn::SiLU()(x), x * x.sigmoid()));
  double g = nn::GELU()(tensor({1.0}, kFloat64)).item<double>();
  CHECK(g == doctest::Approx(0.5 * (1 + std::erf(1 / std::sqrt(2.0)))));
  CHECK(nn::Flatten()(x).sizes() == Shape{2, 6});
  nn::GELU gelu;
  check_module_grads(gelu, input({3, 2}));
}

TEST_CASE("ConvTranspose2d is the adjoint of Conv2d: its output is conv2d's input gradient") {
  manual_seed(9);
  // conv2d: x [1, 3, 7, 7] -> y [1, 4, 4, 4] with stride 2, padding 1 and a 3x2 kernel; the
  // transpose maps a gradient of y's shape back to x's shape (output_padding 0 for H, 1 for W).
  Tensor x = randn({1, 3, 7, 7}, kFloat64).set_requires_grad(true);
  Tensor w = randn({4, 3, 3, 2}, kFloat64);
  Tensor y = conv2d(x, w, {}, {2, 2}, {1, 1});
  Tensor g = randn(y.sizes(), kFloat64);
  y.backward(g);
  Tensor t = nn::functional::conv_transpose2d(g, w, {}, {2, 2}, {1, 1}, {0, 1});
  CHECK(t.sizes() == x.sizes());
  CHECK(close(t, x.grad(), 1e-10));
  nn::ConvTranspose2d layer(4, 6, {3, 3}, {.stride = {2, 2}, .padding = {1, 1}, .output_padding = {1, 1}, .groups = 2});
  CHECK(layer.weight.sizes() == Shape{4, 3, 3, 3});
  CHECK(layer(randn({2, 4, 5, 5})).sizes() == Shape{2, 6, 10, 10});
  CHECK_THROWS_WITH(nn::functional::conv_transpose2d(g, w, {}, {2, 2}, {1, 1}, {2, 0}),
                    doctest::Contains("output_padding"));
}

TEST_CASE("Upsample nearest and bilinear against hand-computed values") {
  Tensor x = tensor(std::vector<double>{1, 2, 3, 4}, {1, 1, 2, 2});
  nn::Upsample near({.scale_factor = {2.0}});
  CHECK(near(x).to_vector<double>() ==
        std::vector<double>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  // align_corners=False: output 4 samples at src = (o + 0.5) / 2 - 0.5 -> 0, 0.25, 0.75, 1 (clamped).
  Tensor row = tensor(std::vector<double>{0, 4}, {1, 1, 1, 2});
  nn::Upsample bil({.size = {1, 4}, .mode = nn::functional::InterpolateMode::bilinear});
  CHECK(bil(row).to_vector<double>() == std::vector<double>{0, 1, 3, 4});
  nn::Upsample corners({.size = {1, 3}, .mode = nn::functional::InterpolateMode::bilinear, .align_corners = true});
  CHECK(corners(row).to_vector<double>() == std::vector<double>{0, 2, 4});
  CHECK_THROWS_WITH(nn::functional::interpolate(x, {3, 3}, {2.0}), doctest::Contains("exactly one of size and scale_factor"));
}

TEST_CASE("GroupNorm, RMSNorm and Conv2d padding=\"same\" as modules") {
  manual_seed(10);
  Tensor x = randn({2, 4, 3}, kFloat64) * 3.0 + 1.0;
  nn::GroupNorm gn(2, 4);
  gn.to(kFloat64);
  Tensor y = gn(x).reshape({2, 2, 6});
  for (double m : y.mean({2}).to_vector<double>()) CHECK(m == doctest::Approx(0.0).epsilon(1e-9));
  for (double s : y.var({2}, 0).to_vector<double>()) CHECK(s == doctest::Approx(1.0).epsilon(1e-4));
  CHECK_THROWS_WITH(nn::GroupNorm(3, 4), doctest::Contains("num_channels=4 must be a positive multiple of num_groups=3"));
  nn::RMSNorm rms({3}, 1e-12);
  rms.to(kFloat64);
  Tensor r = rms(x);
  for (double ms : (r * r).mean({2}).to_vector<double>()) CHECK(ms == doctest::Approx(1.0));
  nn::Conv2d same(4, 5, {4, 4}, {.padding_mode_str = "same"});
  CHECK(same(randn({1, 4, 7, 6})).sizes() == Shape{1, 5, 7, 6});
}
