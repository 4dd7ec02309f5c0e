// Kiln's GPT-2: the shapes and parameter count of GPT-2 small, the LM head tied to the token
// embedding (one parameter, gradients from both uses), GPT-2's initialisation, causality, and
// clear errors for impossible shapes and inputs.
#include <doctest/doctest.h>

#include <cmath>
#include <set>

#include "core/ops.h"
#include "models/gpt_model.h"
#include "tests/file_util.h"

using namespace kiln;
using namespace kiln::models::gpt;

namespace {

GPTConfig tiny() {
  GPTConfig c;
  c.n_layer = 2, c.n_head = 2, c.n_embd = 16, c.block_size = 8, c.vocab_size = 32;
  return c;
}

double std_of(const Tensor& t) { return t.to(kFloat64).std().item<double>(); }

}  // namespace

TEST_CASE("d12 is GPT-2 small: 124,439,808 parameters with GPT-2's vocabulary") {
  manual_seed(0);
  GPT m(named_config("d12", 50257));
  CHECK(m.num_parameters() == 124439808);  // the figure transformers reports for gpt2
  CHECK(m.config.n_layer == 12);
  CHECK(m.config.block_size == 1024);
  CHECK(m.num_non_embedding_parameters() == 124439808 - 1024 * 768);
}

TEST_CASE("the LM head is the token embedding: listed once, and both uses feed its gradient") {
  manual_seed(1);
  GPT m(tiny());
  std::set<std::string> names;
  int wte = 0;
  for (auto& [name, p] : m.named_parameters()) {
    CHECK(names.insert(name).second);
    CHECK(name.find("lm_head") == std::string::npos);
    if (p.data_ptr() == m.wte->weight.data_ptr()) ++wte;
  }
  CHECK(wte == 1);
  CHECK(m.state_dict().count("wte.weight") == 1);
  // Tokens 0..3 only: rows 4.. of wte get gradient only through the LM head.
  Tensor idx = tensor(std::vector<int64_t>{0, 1, 2, 3, 3, 2, 1, 0}, {2, 4});
  GPT::loss(m.forward(idx), idx).backward();
  Tensor g = m.wte->weight.grad();
  REQUIRE(g.defined());
  CHECK(g.narrow(0, 4, 28).abs().sum().item<double>() > 0);
  // Changing the embedding changes the logits through the head too.
  Tensor before = m.forward(idx).detach().clone();
  {
    NoGradGuard ng;
    m.wte->weight.narrow(0, 10, 1).add_(randn({1, 16}));  // a row no input token uses
  }
  Tensor after = m.forward(idx).detach();
  CHECK((after.select(2, 10) - before.select(2, 10)).abs().max().item<double>() > 1e-3);
  CHECK((after.narrow(2, 0, 10) - before.narrow(2, 0, 10)).abs().max().item<double>() == 0.0);
}

TEST_CASE("GPT-2 initialisation: weights N(0, 0.02), c_proj scaled by 1/sqrt(2 n_layer), biases zero") {
  manual_seed(2);
  GPTConfig c = named_config("d6", 256);
  GPT m(c);
  auto& block = static_cast<Block&>(*(*m.h)[0]);
  CHECK(std_of(block.mlp->c_fc->weight) == doctest::Approx(0.02).epsilon(0.02));
  CHECK(std_of(m.wte->weight) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(std_of(block.attn->c_proj->weight) == doctest::Approx(0.02 / std::sqrt(12.0)).epsilon(0.05));
  CHECK(std_of(block.mlp->c_proj->weight) == doctest::Approx(0.02 / std::sqrt(12.0)).epsilon(0.05));
  CHECK(block.attn->c_attn->bias.abs().max().item<double>() == 0.0);
  CHECK(block.ln_1->weight.min().item<double>() == 1.0);
}

TEST_CASE("attention is causal: a later token does not change earlier logits") {
  manual_seed(3);
  GPT m(tiny());
  m.eval();
  NoGradGuard ng;
  Tensor a = tensor(std::vector<int64_t>{5, 6, 7, 8, 9, 10}, {1, 6});
  Tensor b = tensor(std::vector<int64_t>{5, 6, 7, 8, 9, 31}, {1, 6});
  Tensor la = m.forward(a), lb = m.forward(b);
  CHECK((la.narrow(1, 0, 5) - lb.narrow(1, 0, 5)).abs().max().item<double>() == 0.0);
  CHECK((la.narrow(1, 5, 1) - lb.narrow(1, 5, 1)).abs().max().item<double>() > 0.0);
}

TEST_CASE("bad shapes and inputs are refused with the offending value") {
  GPTConfig c = tiny();
  c.n_embd = 15;
  CHECK(test::contains(test::error_of([&] { GPT m(c); }), "n_embd (15) must be a positive multiple of n_head (2)"));
  CHECK(test::contains(test::error_of([] { named_config("d7", 256); }), "unknown configuration 'd7'"));
  GPT m(tiny());
  CHECK(test::contains(test::error_of([&] { m.forward(zeros({1, 9}, kInt64)); }),
                       "sequence of 9 tokens is longer than block_size 8"));
  CHECK(test::contains(test::error_of([&] { m.forward(zeros({9}, kInt64)); }), "expected token ids [B, T]"));
}

TEST_CASE("FLOPs per token follow 6 N + 12 L T C") {
  GPT m(tiny());
  const double n = static_cast<double>(m.num_parameters() - 8 * 16);
  CHECK(m.flops_per_token(8) == doctest::Approx(6 * n + 12.0 * 2 * 8 * 16));
}

TEST_CASE("activation checkpointing gives the same loss and gradients, dropout included") {
  GPTConfig c = tiny();
  c.dropout = 0.1;
  auto run = [&](bool checkpointing) {
    c.checkpoint_activations = checkpointing;
    manual_seed(5);
    GPT m(c);
    Tensor idx = randint(0, 32, {3, 8});
    manual_seed(6);  // the same dropout masks in both runs (the recomputation replays them)
    Tensor loss = GPT::loss(m.forward(idx), idx);
    loss.backward();
    std::vector<Tensor> grads;
    for (auto& [name, p] : m.named_parameters()) grads.push_back(p.grad().clone());
    return std::make_pair(loss.item<double>(), grads);
  };
  auto [plain_loss, plain] = run(false);
  auto [ckpt_loss, ckpt] = run(true);
  CHECK(plain_loss == ckpt_loss);
  REQUIRE(plain.size() == ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) CHECK((plain[i] - ckpt[i]).abs().max().item<double>() == 0.0);
}
