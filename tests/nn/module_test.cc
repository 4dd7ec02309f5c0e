// Module bookkeeping: names, modes, placement, zero_grad, state_dict.
#include <doctest/doctest.h>

#include "nn/nn.h"

using namespace kiln;

namespace {

struct Block : nn::Module {
  Block() : Module("Block") {
    fc = register_module("fc", nn::Linear(4, 3));
    bn = register_module("bn", nn::BatchNorm1d(3));
  }
  Tensor forward(const Tensor& x) override { return bn(fc(x)).relu(); }
  nn::ModulePtr<nn::Linear> fc;
  nn::ModulePtr<nn::BatchNorm1d> bn;
};

std::vector<std::string> names(const nn::NamedTensors& v) {
  std::vector<std::string> out;
  for (auto& p : v) out.push_back(p.first);
  return out;
}

}  // namespace

TEST_CASE("parameters and buffers have dotted names in registration order") {
  nn::ModulePtr<nn::Sequential> model = nn::Sequential{Block(), nn::Linear(3, 2)};
  CHECK(names(model->named_parameters()) ==
        std::vector<std::string>{"0.fc.weight", "0.fc.bias", "0.bn.weight", "0.bn.bias", "1.weight", "1.bias"});
  CHECK(names(model->named_buffers()) ==
        std::vector<std::string>{"0.bn.running_mean", "0.bn.running_var", "0.bn.num_batches_tracked"});
  CHECK(model->num_parameters() == 4 * 3 + 3 + 3 + 3 + 3 * 2 + 2);
  auto mods = model->named_modules();
  CHECK(mods.size() == 5);
  CHECK(mods[2].first == "0.fc");
}

TEST_CASE("duplicate and dotted names are refused") {
  nn::Module m("M");
  m.register_parameter("w", zeros({2}));
  CHECK_THROWS_WITH(m.register_parameter("w", zeros({2})), doctest::Contains("already registered"));
  CHECK_THROWS_WITH(m.register_buffer("a.b", zeros({2})), doctest::Contains("'a.b'"));
}

TEST_CASE("train and eval reach every submodule") {
  auto b = std::make_shared<Block>();
  b->eval();
  CHECK_FALSE(b->bn->is_training());
  b->train();
  CHECK(b->fc->is_training());
}

TEST_CASE("to(dtype) converts in place, keeping references valid") {
  auto lin = std::make_shared<nn::Linear>(3, 2);
  Tensor w = lin->weight;
  lin->to(kFloat64);
  CHECK(w.dtype() == kFloat64);
  CHECK(lin->weight.dtype() == kFloat64);
  CHECK(w.requires_grad());
  Tensor y = (*lin)(randn({5, 3}, kFloat64));
  CHECK(y.dtype() == kFloat64);
}

TEST_CASE("zero_grad clears gradients") {
  auto lin = std::make_shared<nn::Linear>(3, 2);
  (*lin)(randn({4, 3})).sum().backward();
  CHECK(lin->weight.grad().defined());
  lin->zero_grad(/*set_to_none=*/false);
  for (float v : lin->weight.grad().to_vector<float>()) CHECK(v == 0.0f);
  lin->zero_grad();
  CHECK_FALSE(lin->weight.grad().defined());
}

TEST_CASE("state_dict round trip and strict loading errors") {
  manual_seed(7);
  auto a = std::make_shared<Block>(), b = std::make_shared<Block>();
  b->load_state_dict(a->state_dict());
  CHECK(b->fc->weight.to_vector<float>() == a->fc->weight.to_vector<float>());

  nn::StateDict sd = a->state_dict();
  sd.erase("fc.bias");
  sd["extra"] = zeros({1});
  Tensor before = b->fc->weight.clone();
  CHECK_THROWS_WITH(b->load_state_dict(sd), doctest::Contains("missing keys [fc.bias]"));
  CHECK_THROWS_WITH(b->load_state_dict(sd), doctest::Contains("unexpected keys [extra]"));

  nn::StateDict bad = a->state_dict();
  bad["fc.weight"] = zeros({5, 5});
  CHECK_THROWS_WITH(b->load_state_dict(bad), doctest::Contains("fc.weight"));
  CHECK(b->fc->weight.to_vector<float>() == before.to_vector<float>());  // nothing changed

  sd.erase("extra");
  b->load_state_dict(sd, /*strict=*/false);
}

TEST_CASE("modules print like PyTorch's") {
  auto b = std::make_shared<Block>();
  std::string s = b->repr();
  CHECK(s.find("(fc): Linear(in_features=4, out_features=3, bias=true)") != std::string::npos);
}
