// The Optimizer base: parameter groups and their options, zero_grad, lr, gradient accumulation,
// and state_dict save/load (round trips continue identically; bad dicts are refused, naming the
// key, and change nothing).
#include <doctest/doctest.h>

#include "optim/adam.h"
#include "optim/sgd.h"
#include "optim_test_util.h"

using namespace kiln;
using namespace kiln::optim;
using namespace kiln::optim_test;

namespace {

Tensor param(const Vec& v) { return tensor<double>(v).set_requires_grad(true); }

bool same_values(const StateDict& a, const StateDict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, t] : a) {
    auto it = b.find(k);
    if (it == b.end() || it->second.sizes() != t.sizes() || values(it->second) != values(t)) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("parameter groups take their own options, defaults fill the rest") {
  Tensor a = param({1.0, 2.0}), b = param({3.0}), c = param({-1.0});
  SGD opt({ParamGroup({a}), ParamGroup({b, c}, {{"lr", 0.5}, {"momentum", 0.9}})}, SGDOptions(0.1));
  REQUIRE(opt.param_groups().size() == 2);
  CHECK(opt.param_groups()[0].get("lr") == 0.1);
  CHECK(opt.param_groups()[0].get("momentum") == 0);
  CHECK(opt.param_groups()[1].get("lr") == 0.5);
  CHECK(opt.param_groups()[1].get("momentum") == 0.9);
  CHECK(opt.param_groups()[1].get("weight_decay") == 0);
  CHECK(opt.num_params() == 3);

  for (Tensor t : {a, b, c}) t.set_grad(ones_like(t));
  opt.step();
  check_close(values(a), {0.9, 1.9}, 1e-15);
  check_close(values(b), {2.5}, 1e-15);
  check_close(values(c), {-1.5}, 1e-15);
  CHECK(opt.state(0).empty());  // group 0 has no momentum
  CHECK(opt.state(1).count("momentum_buffer") == 1);

  // Per-group lr can be edited in place; set_lr sets every group.
  opt.param_groups()[1].options["lr"] = 0.25;
  CHECK(opt.lr() == 0.1);
  opt.set_lr(0.01);
  CHECK(opt.param_groups()[1].get("lr") == 0.01);
}

TEST_CASE("add_param_group appends with defaults; bad groups are refused") {
  Tensor a = param({1.0}), b = param({2.0});
  Adam opt({a}, AdamOptions(0.1));
  opt.add_param_group(ParamGroup({b}, {{"lr", 0.01}}));
  CHECK(opt.num_params() == 2);
  CHECK(opt.param_groups()[1].get("lr") == 0.01);
  CHECK(opt.param_groups()[1].get("beta2") == 0.999);
  CHECK_THROWS_WITH(opt.add_param_group(ParamGroup({a})), doctest::Contains("appears more than once"));
  CHECK_THROWS_WITH(opt.add_param_group(ParamGroup({param({1.0})}, {{"learning_rate", 0.1}})),
                    doctest::Contains("unknown option 'learning_rate'"));
  CHECK_THROWS_WITH(opt.add_param_group(ParamGroup({param({1.0})}, {{"lr", -1.0}})), doctest::Contains("invalid lr"));
  CHECK(opt.num_params() == 2);
  CHECK_THROWS_WITH(SGD(std::vector<Tensor>{}), doctest::Contains("empty parameter list"));
  CHECK_THROWS_WITH(SGD({a, a}), doctest::Contains("appears more than once"));
  CHECK_THROWS_WITH(SGD({a * 2.0}), doctest::Contains("not a leaf"));
  CHECK_THROWS_WITH(SGD({tensor({1.0}, kInt64)}), doctest::Contains("floating"));
}

TEST_CASE("zero_grad drops gradients or fills them with zeros") {
  Tensor a = param({1.0, 2.0});
  SGD opt({a}, SGDOptions(0.1));
  a.set_grad(tensor({1.0, 1.0}, kFloat64));
  opt.zero_grad(false);
  REQUIRE(a.grad().defined());
  CHECK(values(a.grad()) == Vec{0, 0});
  opt.zero_grad();
  CHECK_FALSE(a.grad().defined());
  opt.step();  // no gradients: nothing moves
  CHECK(values(a) == Vec{1.0, 2.0});
}

TEST_CASE("gradient accumulation: N backward calls with loss / N, one step, equal one full-batch step") {
  Tensor x = tensor({1.0, 2.0, 3.0, 4.0}, kFloat64);
  auto loss_of = [](const Tensor& w, const Tensor& xs) { return (w * xs - 1.0).square().mean(); };
  Tensor w1 = param({0.5}), w2 = param({0.5});
  SGD full({w1}, SGDOptions(0.1).set_momentum(0.9)), accum({w2}, SGDOptions(0.1).set_momentum(0.9));
  for (int step = 0; step < 3; ++step) {
    full.zero_grad();
    loss_of(w1, x).backward();
    full.step();
    accum.zero_grad();
    for (int i = 0; i < 2; ++i) (loss_of(w2, x.slice(0, 2 * i, 2 * i + 2)) / 2.0).backward();
    accum.step();
    check_close(values(w2), values(w1), 1e-14);
  }
}

TEST_CASE("state_dict round trip: a fresh optimizer continues exactly as the original") {
  auto build = [](Tensor& a, Tensor& b) {
    a = tensor<double>({0.5, -1.0, 2.0, 0.25}, {2, 2}).set_requires_grad(true);
    b = tensor<double>({1.5, -0.5}, {2}).set_requires_grad(true);
  };
  auto grads = [](Tensor& a, Tensor& b, int step) {
    a.set_grad(tensor<double>({0.1 * step, -0.2, 0.3, 0.05 * step}, {2, 2}));
    b.set_grad(tensor<double>({-0.4, 0.7 / step}, {2}));
  };
  SUBCASE("AdamW with two groups and amsgrad") {
    Tensor a, b, a2, b2;
    build(a, b);
    AdamOptions o = AdamOptions(0.1).set_amsgrad();
    AdamW opt({ParamGroup({a}), ParamGroup({b}, {{"lr", 0.02}})}, o);
    for (int s = 1; s <= 2; ++s) grads(a, b, s), opt.step();
    StateDict sd = opt.state_dict();
    CHECK(sd.count("state.0.exp_avg"));
    CHECK(sd.count("state.1.max_exp_avg_sq"));
    CHECK(sd.at("state.1.step").item<double>() == 2);
    CHECK(sd.at("param_groups.1.lr").item<double>() == 0.02);
    CHECK(sd.at("param_groups.0.lr").dim() == 0);
    CHECK(values(sd.at("param_groups.1.params")) == Vec{1});

    build(a2, b2);
    {
      NoGradGuard g;
      a2.copy_(a), b2.copy_(b);
    }
    AdamW fresh({ParamGroup({a2}), ParamGroup({b2})}, AdamOptions(0.5));
    fresh.load_state_dict(sd);
    CHECK(fresh.param_groups()[1].get("lr") == 0.02);
    CHECK(fresh.param_groups()[0].get("amsgrad") == 1);
    for (int s = 3; s <= 4; ++s) {
      grads(a, b, s), opt.step();
      grads(a2, b2, s), fresh.step();
      CHECK(values(a2) == values(a));
      CHECK(values(b2) == values(b));
    }
    // The state_dict was a snapshot: stepping did not change it.
    CHECK(sd.at("state.0.step").item<double>() == 2);
  }
  SUBCASE("SGD with momentum") {
    Tensor a, b, a2, b2;
    build(a, b);
    SGD opt({a, b}, SGDOptions(0.1).set_momentum(0.9).set_nesterov());
    grads(a, b, 1), opt.step();
    StateDict sd = opt.state_dict();
    CHECK(sd.count("state.1.momentum_buffer"));
    CHECK(sd.at("param_groups.0.nesterov").item<double>() == 1);
    build(a2, b2);
    {
      NoGradGuard g;
      a2.copy_(a), b2.copy_(b);
    }
    SGD fresh({a2, b2}, SGDOptions(0.3));
    fresh.load_state_dict(sd);
    grads(a, b, 2), opt.step();
    grads(a2, b2, 2), fresh.step();
    CHECK(values(a2) == values(a));
    CHECK(values(b2) == values(b));
  }
}

TEST_CASE("load_state_dict refuses bad dicts, naming the key, and changes nothing") {
  Tensor a = tensor<double>({1.0, 2.0, 3.0}, {3}).set_requires_grad(true);
  Tensor b = tensor<double>({1.0, 2.0}, {2}).set_requires_grad(true);
  Adam opt({a, b}, AdamOptions(0.1));
  a.set_grad(ones_like(a)), b.set_grad(ones_like(b));
  opt.step();
  const StateDict good = opt.state_dict();

  Adam target({a, b}, AdamOptions(0.3));
  target.load_state_dict(good);
  target.step();
  const StateDict before = target.state_dict();
  auto refuses = [&](StateDict sd, const std::string& message) {
    CHECK_THROWS_WITH(target.load_state_dict(sd), doctest::Contains(message.c_str()));
    CHECK(same_values(target.state_dict(), before));
  };

  StateDict sd = good;
  sd.erase("state.1.exp_avg");
  refuses(sd, "missing key 'state.1.exp_avg'");

  sd = good;
  sd.erase("param_groups.0.lr");
  refuses(sd, "missing key 'param_groups.0.lr'");

  sd = good;
  sd["state.0.exp_avg_sq"] = zeros({2, 2}, kFloat64);
  refuses(sd, "shape mismatch for 'state.0.exp_avg_sq': saved [2, 2], but parameter 0 has shape [3]");

  sd = good;
  sd["state.7.exp_avg"] = zeros({3}, kFloat64);
  refuses(sd, "unexpected key 'state.7.exp_avg'");

  sd = good;
  sd["state.0.momentum_buffer"] = zeros({3}, kFloat64);
  refuses(sd, "keeps no per-parameter state named 'momentum_buffer'");

  sd = good;
  sd["param_groups.1.lr"] = scalar_tensor(0.1, kFloat64);
  refuses(sd, "unexpected key 'param_groups.1.lr'");

  sd = good;
  sd["param_groups.0.momentum"] = scalar_tensor(0.1, kFloat64);
  refuses(sd, "Adam has no option 'momentum'");

  sd = good;
  sd["param_groups.0.beta1"] = scalar_tensor(2.0, kFloat64);
  refuses(sd, "invalid beta1 2");

  sd = good;
  sd["param_groups.0.params"] = tensor<int64_t>({0}, {1});
  refuses(sd, "lists parameters");

  sd = good;
  sd["optimizer"] = zeros({1});
  refuses(sd, "unexpected key 'optimizer'");

  // A dict from another optimizer kind names what it does not know.
  SGD sgd({a, b}, SGDOptions(0.1).set_momentum(0.9));
  CHECK_THROWS_WITH(sgd.load_state_dict(good), doctest::Contains("SGD has no option"));
}

TEST_CASE("load_state_dict copies state to each parameter's dtype") {
  Tensor a = tensor<double>({1.0, 2.0}, {2}, kFloat32).set_requires_grad(true);
  Adam opt({a}, AdamOptions(0.1));
  StateDict sd;
  sd["param_groups.0.params"] = tensor<int64_t>({0}, {1});
  for (auto& [k, v] : AdamOptions(0.1).to_map(0)) sd["param_groups.0." + k] = scalar_tensor(v, kFloat64);
  sd["state.0.step"] = scalar_tensor(4.0, kFloat64);
  sd["state.0.exp_avg"] = tensor({0.1, 0.2}, kFloat64);
  sd["state.0.exp_avg_sq"] = tensor({0.01, 0.04}, kFloat64);
  opt.load_state_dict(sd);
  CHECK(opt.state(0).at("exp_avg").dtype() == kFloat32);
  a.set_grad(ones_like(a));
  opt.step();
  CHECK(opt.state(0).at("step").item<double>() == 5);
}
