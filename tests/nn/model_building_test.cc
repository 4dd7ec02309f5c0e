// Writing models the libtorch way, and the PyTorch way: Sequential from module objects and
// shared_ptrs, modules called like functions (`c_proj(gelu(c_fc(x)))`, ModulePtr), Size2d options
// (`3` for a square kernel), and custom modules that derive their own type name.
#include <doctest/doctest.h>

#include "core/generator.h"
#include "nn/nn.h"

using namespace kiln;

namespace {

std::vector<std::string> names(const nn::NamedTensors& v) {
  std::vector<std::string> out;
  for (auto& p : v) out.push_back(p.first);
  return out;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && (a - b).abs().max().item<float>() == 0;
}

void check_same_parameters(const nn::Module& a, const nn::Module& b) {
  auto pa = a.named_parameters(), pb = b.named_parameters();
  REQUIRE(names(pa) == names(pb));
  for (size_t i = 0; i < pa.size(); ++i) CHECK(same(pa[i].second, pb[i].second));
}

/// Names itself by its type, with no string of its own.
struct TinyBlock : nn::Module {
  TinyBlock() { fc = register_module("fc", nn::Linear(3, 3)); }
  Tensor forward(const Tensor& x) override { return fc(x).relu(); }
  nn::ModulePtr<nn::Linear> fc;
};

}  // namespace

namespace outer::inner {
template <class T>
struct Wrapped : kiln::nn::Module {};
}  // namespace outer::inner

TEST_CASE("a Sequential of module objects equals one built from shared_ptrs") {
  manual_seed(3);
  auto old_way = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 2)});
  manual_seed(3);
  nn::Sequential seq{nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 2)};  // braces: built left to right
  check_same_parameters(seq, *old_way);
  CHECK(seq.repr() == old_way->repr());
  Tensor x = randn({5, 4});
  CHECK(same(seq(x), (*old_way)(x)));
}

TEST_CASE("in parentheses the same layers are built, whatever order the compiler picks") {
  nn::Sequential seq(nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 2));
  auto old_way = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(8, 2)});
  CHECK(names(seq.named_parameters()) == names(old_way->named_parameters()));
  CHECK(seq.repr() == old_way->repr());
  old_way->load_state_dict(seq.state_dict());
  Tensor x = randn({5, 4});
  CHECK(same(seq(x), (*old_way)(x)));
}

TEST_CASE("objects and shared_ptrs mix; a shared_ptr layer stays shared") {
  auto shared = std::make_shared<nn::Linear>(4, 4);
  nn::Sequential seq{nn::ReLU(), shared, nn::Linear(4, 2)};
  CHECK(seq.size() == 3);
  CHECK(seq[1] == shared);
  CHECK(names(seq.named_parameters()) == std::vector<std::string>{"1.weight", "1.bias", "2.weight", "2.bias"});
  seq.push_back(nn::Tanh());
  seq.push_back(std::make_shared<nn::Sigmoid>());
  CHECK(seq.size() == 5);
  CHECK(seq[4]->type_name() == "Sigmoid");
}

TEST_CASE("a Sequential nests inside another, keeping dotted names") {
  nn::Sequential outer{nn::Sequential{nn::Linear(2, 3), nn::ReLU()}, nn::Linear(3, 1)};
  CHECK(names(outer.named_parameters()) == std::vector<std::string>{"0.0.weight", "0.0.bias", "1.weight", "1.bias"});
  CHECK(outer(randn({4, 2})).sizes() == IntList{4, 1});
  CHECK(outer.repr().find("(0): Sequential(") != std::string::npos);
}

TEST_CASE("a moved module keeps its parameters (the same tensors)") {
  nn::Linear a(3, 2);
  Tensor w = a.weight;
  nn::Linear b(std::move(a));
  CHECK(same(b.weight, w));
  CHECK(b.named_parameters().at(0).second.data_ptr<float>() == w.data_ptr<float>());
}

TEST_CASE("Size2d: one number is a square size, {h, w} and IntList still work") {
  manual_seed(5);
  nn::Conv2d square(1, 4, 3, {.padding = 1});
  manual_seed(5);
  nn::Conv2d spelled(1, 4, IntList{3, 3}, {.stride = {1, 1}, .padding = {1, 1}});
  check_same_parameters(square, spelled);
  Tensor x = randn({2, 1, 6, 6});
  CHECK(same(square(x), spelled(x)));
  CHECK(square(x).sizes() == IntList{2, 4, 6, 6});
  CHECK(nn::Conv2d(1, 2, {3, 5}).weight.sizes() == IntList{2, 1, 3, 5});
  CHECK(nn::Conv2d(1, 2, 3, {.stride = 2})(x).sizes() == IntList{2, 2, 2, 2});
  CHECK(nn::ConvTranspose2d(2, 1, 2, {.stride = 2})(randn({1, 2, 3, 3})).sizes() == IntList{1, 1, 6, 6});
  CHECK(same(nn::MaxPool2d(2)(x), nn::MaxPool2d({2, 2})(x)));
  CHECK(nn::MaxPool2d(2)(x).sizes() == IntList{2, 1, 3, 3});  // stride defaults to the kernel
  CHECK(nn::AvgPool2d(3, 1, 1)(x).sizes() == IntList{2, 1, 6, 6});
  CHECK(nn::AdaptiveAvgPool2d(1)(x).sizes() == IntList{2, 1, 1, 1});
  CHECK(nn::MaxPool2d(2).repr() == "MaxPool2d(kernel_size=[2, 2], dilation=[1, 1])");
}

TEST_CASE("a custom module without a name prints its own type") {
  TinyBlock b;
  CHECK(b.type_name() == "TinyBlock");
  CHECK(names(b.named_parameters()) == std::vector<std::string>{"fc.weight", "fc.bias"});
  CHECK(b.repr().rfind("TinyBlock(\n", 0) == 0);
  CHECK(outer::inner::Wrapped<nn::Linear>().type_name() == "Wrapped<kiln::nn::Linear>");
  CHECK(nn::Module().type_name() == "Module");
  CHECK(nn::Module("Custom").type_name() == "Custom");
  CHECK_THROWS_WITH(b.register_parameter("fc", zeros({1})), doctest::Contains("TinyBlock.register_parameter"));
}

namespace {

/// A GPT-style MLP as PyTorch writes it: children called like functions.
struct Mlp : nn::Module {
  Mlp() {
    c_fc = register_module("c_fc", nn::Linear(4, 16));
    c_proj = register_module("c_proj", nn::Linear(16, 4));
  }
  Tensor forward(const Tensor& x) override { return c_proj(gelu(c_fc(x))); }
  nn::ModulePtr<nn::Linear> c_fc, c_proj;
};

/// A model factory without make_shared: the Sequential object converts into a ModulePtr.
nn::ModulePtr<> make_classifier() { return nn::Sequential{nn::Linear(4, 8), nn::ReLU(), nn::Linear(8, 2)}; }

}  // namespace

TEST_CASE("a module is called like a function (nn.Module.__call__), through a ModulePtr too") {
  manual_seed(4);
  Mlp mlp;
  Tensor x = randn({3, 4});
  namespace F = nn::functional;
  Tensor want = F::linear(gelu(F::linear(x, mlp.c_fc->weight, mlp.c_fc->bias)), mlp.c_proj->weight, mlp.c_proj->bias);
  CHECK(same(mlp(x), want));
  CHECK(same(mlp(x), mlp.forward(x)));

  nn::ModulePtr<> model = make_classifier();  // a Sequential, held as a Module
  CHECK(model->type_name() == "Sequential");
  CHECK(model(x).sizes() == Shape{3, 2});
  CHECK(same(model(x), model->forward(x)));
  nn::ModulePtr<nn::Sequential> seq = nn::Sequential{Mlp(), nn::Tanh()};
  CHECK(seq->size() == 2);
  CHECK(names(seq->named_parameters()) ==
        std::vector<std::string>{"0.c_fc.weight", "0.c_fc.bias", "0.c_proj.weight", "0.c_proj.bias"});
  CHECK(same(seq(x), tanh((*(*seq)[0])(x))));
  std::shared_ptr<nn::Module> plain = seq;  // still a shared_ptr: containers and registration take it
  CHECK(plain.use_count() == 2);
}

TEST_CASE("modules whose forward takes more arguments are called with them") {
  manual_seed(5);
  nn::MultiheadAttention mha(8, 2);
  Tensor q = randn({1, 3, 8}), kv = randn({1, 5, 8});
  CHECK(same(mha(q, kv, kv), mha.forward(q, kv, kv)));
  CHECK(same(mha(q, q, q, {.is_causal = true}), mha.forward(q, q, q, {.is_causal = true})));
  CHECK(same(mha(q), mha.forward(q)));  // self-attention through Module's one-tensor call
  nn::ModulePtr<nn::MultiheadAttention> p = nn::MultiheadAttention(8, 2);
  CHECK(p(q, kv, kv).sizes() == Shape{1, 3, 8});
}
