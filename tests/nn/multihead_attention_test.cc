// MultiheadAttention: PyTorch's parameter names and shapes, its output against the computation
// spelled out with core ops, PyTorch's mask conventions (true = blocked, key padding, is_causal),
// f64 gradcheck, dropout only in training; ModuleList and ModuleDict registration.
#include <doctest/doctest.h>

#include <cmath>

#include "nn/nn.h"
#include "tests/testing/compare.h"

using namespace kiln;
using kiln::test::max_diff;
namespace F = kiln::nn::functional;

namespace {

/// nn.MultiheadAttention's math with the composite attention and an additive mask [B, H|1, Tq, Tk].
Tensor reference(nn::MultiheadAttention& m, const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                 const Tensor& add_mask) {
  const int64_t B = q_in.size(0), Tq = q_in.size(1), Tk = k_in.size(1), E = m.embed_dim, H = m.num_heads;
  auto proj = [&](const Tensor& x, int64_t i, int64_t T) {
    Tensor w = m.in_proj_weight.slice(0, i * E, (i + 1) * E), b = m.in_proj_bias.slice(0, i * E, (i + 1) * E);
    return (matmul(x, w.t()) + b).reshape({B, T, H, E / H}).permute({0, 2, 1, 3});
  };
  Tensor s = matmul(proj(q_in, 0, Tq), proj(k_in, 1, Tk).transpose(2, 3)) / std::sqrt(double(E / H));
  if (add_mask.defined()) s = s + add_mask;
  Tensor y = matmul(softmax(s, -1), proj(v_in, 2, Tk)).permute({0, 2, 1, 3}).reshape({B, Tq, E});
  return matmul(y, m.out_proj->weight.t()) + m.out_proj->bias;
}

}  // namespace

TEST_CASE("MultiheadAttention has PyTorch's parameter names and shapes") {
  nn::MultiheadAttention m(12, 3);
  auto sd = m.state_dict();
  REQUIRE(sd.size() == 4);
  CHECK(sd.at("in_proj_weight").shape() == Shape{36, 12});
  CHECK(sd.at("in_proj_bias").shape() == Shape{36});
  CHECK(sd.at("out_proj.weight").shape() == Shape{12, 12});
  CHECK(sd.at("out_proj.bias").shape() == Shape{12});
  CHECK(sd.at("in_proj_bias").abs().max().item<double>() == 0.0);  // PyTorch zeroes both biases
  CHECK(sd.at("out_proj.bias").abs().max().item<double>() == 0.0);
  nn::MultiheadAttention nobias(12, 3, 0.0, false);
  CHECK(nobias.state_dict().size() == 2);
  CHECK_THROWS_WITH(nn::MultiheadAttention(10, 3), doctest::Contains("embed_dim 10 must be a positive multiple of num_heads 3"));
}

TEST_CASE("MultiheadAttention forward equals the spelled-out computation (cross-attention, Tq != Tk)") {
  manual_seed(5);
  nn::MultiheadAttention m(16, 4);
  nn::init::uniform_(m.in_proj_bias, -0.5, 0.5);
  nn::init::uniform_(m.out_proj->bias, -0.5, 0.5);
  Tensor q = randn({2, 7, 16}), kv = randn({2, 9, 16});
  CHECK(max_diff(m(q, kv, kv), reference(m, q, kv, kv, Tensor())) < 1e-5);
  CHECK(m(q).shape() == Shape{2, 7, 16});
}

TEST_CASE("MultiheadAttention masks follow nn.MultiheadAttention's convention") {
  manual_seed(6);
  nn::MultiheadAttention m(8, 2);
  Tensor x = randn({2, 5, 8});
  Tensor blocked = ones({5, 5}, kBool).triu(1);  // true = may not attend
  Tensor add = zeros({5, 5}).masked_fill(blocked, -INFINITY);
  Tensor by_bool = m(x, x, x, {.attn_mask = blocked});
  CHECK(max_diff(by_bool, reference(m, x, x, x, add)) < 1e-5);
  CHECK(max_diff(m(x, x, x, {.is_causal = true}), by_bool) < 1e-5);
  CHECK(max_diff(m(x, x, x, {.attn_mask = add}), by_bool) < 1e-5);
  // Key padding: batch 1 ignores its last two keys.
  Tensor pad = zeros({2, 5}, kBool);
  pad.slice(0, 1, 2).slice(1, 3, 5).fill_(true);
  Tensor pad_add = zeros({2, 1, 1, 5}).masked_fill(pad.reshape({2, 1, 1, 5}), -INFINITY);
  CHECK(max_diff(m(x, x, x, {.key_padding_mask = pad}), reference(m, x, x, x, pad_add)) < 1e-5);
  CHECK(max_diff(m(x, x, x, {.attn_mask = blocked, .key_padding_mask = pad}),
                 reference(m, x, x, x, pad_add + add)) < 1e-5);
  // Per-head masks [B * H, Tq, Tk].
  Tensor per_head = randn({4, 5, 5});
  CHECK(max_diff(m(x, x, x, {.attn_mask = per_head}), reference(m, x, x, x, per_head.reshape({2, 2, 5, 5}))) <
        1e-5);
  CHECK_THROWS_WITH(m(x, x, x, {.attn_mask = ones({4, 5}, kBool)}),
                    doctest::Contains("attn_mask must be [5, 5] or [4, 5, 5], got [4, 5]"));
}

TEST_CASE("MultiheadAttention gradcheck in f64 (input and every parameter)") {
  manual_seed(7);
  nn::MultiheadAttention m(4, 2);
  m.to(kFloat64);
  nn::init::uniform_(m.in_proj_bias, -0.5, 0.5);
  Tensor x = randn({2, 3, 4}, kFloat64).requires_grad_();
  std::vector<Tensor> inputs{x};
  for (Tensor p : m.parameters()) inputs.push_back(p);
  auto r = autograd::gradcheck([&](const std::vector<Tensor>& v) { return m(v[0], v[0], v[0], {.is_causal = true}); },
                               inputs);
  CHECK_MESSAGE(r.ok, r.message);
}

TEST_CASE("MultiheadAttention applies dropout only in training") {
  manual_seed(8);
  nn::MultiheadAttention m(8, 2, 0.5);
  Tensor x = randn({2, 6, 8});
  m.eval();
  CHECK(max_diff(m(x), m(x)) == 0.0);
  m.train();
  CHECK(max_diff(m(x), m(x)) > 1e-3);
}

TEST_CASE("ModuleList and ModuleDict register their modules by index and by key") {
  nn::ModuleList list;
  list.push_back(nn::Linear(3, 4));
  list.push_back(std::make_shared<nn::Linear>(4, 2));
  CHECK(list.size() == 2);
  CHECK(list.at<nn::Linear>(-1)->out_features == 2);
  CHECK(list.at<nn::MultiheadAttention>(0) == nullptr);
  CHECK_THROWS_WITH(list[2], doctest::Contains("index 2 is out of range for 2 modules"));
  auto sd = list.state_dict();
  CHECK(sd.count("0.weight") == 1);
  CHECK(sd.count("1.bias") == 1);
  Tensor h = randn({5, 3});
  for (const auto& l : list) h = (*l)(h);
  CHECK(h.shape() == Shape{5, 2});

  nn::ModuleDict dict{{"attn", std::make_shared<nn::MultiheadAttention>(8, 2)}};
  dict.insert("proj", nn::Linear(8, 8));
  CHECK(dict.keys() == std::vector<std::string>{"attn", "proj"});
  CHECK(dict.state_dict().count("attn.out_proj.weight") == 1);
  CHECK(dict.at<nn::Linear>("proj")->in_features == 8);
  CHECK_THROWS_WITH(dict["nope"], doctest::Contains("no module under key 'nope'"));
  CHECK_THROWS_WITH(dict.insert("proj", nn::Linear(1, 1)), doctest::Contains("key 'proj' is already present"));
  dict.eval();
  CHECK(!dict["attn"]->is_training());
  CHECK_THROWS(dict(randn({1})));
}
