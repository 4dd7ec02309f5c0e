// ResNet-18 (models/resnet.h): torchvision's parameter count and state-dict names, the shapes of
// both stems, torchvision's init, a backward that reaches every parameter, BatchNorm's train and
// eval modes, and clear errors for bad options and inputs.
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <string>

#include "core/ops.h"
#include "models/build_model.h"
#include "models/resnet.h"
#include "tests/testing/compare.h"

using namespace kiln;
using namespace kiln::models;

namespace {

/// The keys of torchvision.models.resnet18().state_dict(), built from its layout.
std::set<std::string> torchvision_keys() {
  std::set<std::string> keys{"conv1.weight", "fc.weight", "fc.bias"};
  auto bn = [&](const std::string& p) {
    for (const char* s : {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"})
      keys.insert(p + "." + s);
  };
  bn("bn1");
  for (int layer = 1; layer <= 4; ++layer)
    for (int block = 0; block < 2; ++block) {
      const std::string p = "layer" + std::to_string(layer) + "." + std::to_string(block) + ".";
      keys.insert(p + "conv1.weight");
      keys.insert(p + "conv2.weight");
      bn(p + "bn1");
      bn(p + "bn2");
      if (layer > 1 && block == 0) {
        keys.insert(p + "downsample.0.weight");
        bn(p + "downsample.1");
      }
    }
  return keys;
}

ResNetOptions fashion(int64_t width = 8) {
  return {.num_classes = 10, .in_channels = 1, .width = width, .small_input = true};
}


}  // namespace

TEST_CASE("resnet18 has torchvision's 11,689,512 parameters and its 122 state-dict names") {
  manual_seed(0);
  ResNet m;
  CHECK(m.num_parameters() == 11689512);  // sum(p.numel() for p in torchvision.models.resnet18().parameters())
  std::set<std::string> names;
  for (const auto& [name, t] : m.state_dict()) names.insert(name);
  CHECK(names.size() == 122);
  CHECK(names == torchvision_keys());
  CHECK(m.conv1->weight.sizes() == Shape{64, 3, 7, 7});
  CHECK(m.layer4->named_parameters().front().second.sizes() == Shape{512, 256, 3, 3});
  CHECK(m.fc->weight.sizes() == Shape{1000, 512});
  CHECK(m.state_dict().at("layer1.0.bn1.num_batches_tracked").dtype() == kInt64);
  // The ImageNet stem: 64x64 -> 16x16 into layer1 -> 2x2 into the pool.
  Tensor y = m(randn({2, 3, 64, 64}));
  CHECK(y.sizes() == Shape{2, 1000});
}

TEST_CASE("the small-input stem: 3x3 stride-1 conv1, no max-pool, same names") {
  manual_seed(1);
  ResNet m(fashion(16));
  CHECK(m.conv1->weight.sizes() == Shape{16, 1, 3, 3});
  CHECK(m.conv1->options.stride.list() == IntList{1, 1});
  std::set<std::string> names;
  for (const auto& [name, t] : m.state_dict()) names.insert(name);
  CHECK(names == torchvision_keys());
  // At width w the blocks hold 2724 w^2 convolution weights and 150 w BatchNorm parameters
  // (11,157,504 + 9,600 at torchvision's 64); here conv1 has 16 x 1 x 3 x 3 and fc 128 x 10 + 10.
  CHECK(m.num_parameters() == 2724 * 16 * 16 + 150 * 16 + 16 * 9 + 128 * 10 + 10);  // 701,178
  CHECK(m.layer2->named_parameters().front().second.sizes() == Shape{32, 16, 3, 3});
  Tensor y = m(randn({4, 1, 32, 32}));
  CHECK(y.sizes() == Shape{4, 10});
  // Other sizes work too (the pool averages whatever is left): 28x28 -> 4x4 at layer4.
  CHECK(m(randn({2, 1, 28, 28})).sizes() == Shape{2, 10});
}

TEST_CASE("torchvision's init: convolutions He-normal with fan_out, BatchNorm 1 and 0") {
  manual_seed(2);
  ResNet m(fashion(32));
  // layer3.0.conv2: [128, 128, 3, 3], fan_out = 128 * 9 -> std sqrt(2 / 1152).
  Tensor w = m.state_dict().at("layer3.0.conv2.weight");
  const double std = w.to(kFloat64).std().item<double>();
  CHECK(std == doctest::Approx(std::sqrt(2.0 / 1152)).epsilon(0.05));
  CHECK(std::abs(w.to(kFloat64).mean().item<double>()) < 0.003);
  Tensor ds = m.state_dict().at("layer2.0.downsample.0.weight");  // [64, 32, 1, 1]: fan_out 64
  CHECK(ds.to(kFloat64).std().item<double>() == doctest::Approx(std::sqrt(2.0 / 64)).epsilon(0.15));
  for (const auto& [name, t] : m.state_dict()) {
    if (name.ends_with("bn1.weight") || name.ends_with("bn2.weight") || name.ends_with("downsample.1.weight"))
      CHECK(t.min().item<double>() == 1.0);
    if (name.ends_with("bn2.bias")) CHECK(t.abs().max().item<double>() == 0.0);
  }
}

TEST_CASE("one backward gives every parameter a nonzero gradient") {
  manual_seed(3);
  ResNet m(fashion(8));
  Tensor x = randn({4, 1, 32, 32});
  Tensor y = tensor({1, 3, 5, 7}, dtype(kInt64));
  nn::functional::cross_entropy(m(x), y).backward();
  int64_t checked = 0;
  for (const auto& [name, p] : m.named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().sizes() == p.sizes());
    CHECK(p.grad().abs().max().item<double>() > 0);
    ++checked;
  }
  CHECK(checked == 62);  // 20 convolutions, 20 BatchNorms x 2, fc x 2
}

TEST_CASE("BatchNorm: train mode uses batch statistics and updates the running ones; eval uses them") {
  manual_seed(4);
  ResNet m(fashion(8));
  Tensor x = randn({6, 1, 32, 32}) * 2.0 + 0.5;
  Tensor mean0 = m.bn1->running_mean.clone();
  // Train mode: a sample's output depends on the rest of its batch, and each forward counts.
  Tensor train_all = m(x);
  Tensor train_first = m(x.narrow(0, 0, 3));
  CHECK(test::max_diff(train_all.narrow(0, 0, 3), train_first) > 1e-4);
  CHECK(m.bn1->num_batches_tracked.item<int64_t>() == 2);
  CHECK(m.state_dict().at("layer4.1.bn2.num_batches_tracked").item<int64_t>() == 2);
  CHECK(test::max_diff(m.bn1->running_mean, mean0) > 1e-3);
  // Eval mode: running statistics, so a sample's output is its own; nothing is updated.
  m.eval();
  Tensor mean1 = m.bn1->running_mean.clone();
  Tensor eval_all = m(x);
  Tensor eval_first = m(x.narrow(0, 0, 3));
  CHECK(test::max_diff(eval_all.narrow(0, 0, 3), eval_first) < 1e-5);
  CHECK(test::max_diff(eval_all, train_all) > 1e-3);
  CHECK(test::max_diff(m.bn1->running_mean, mean1) == 0.0);
  CHECK(m.bn1->num_batches_tracked.item<int64_t>() == 2);
  m.train();
  CHECK(m.layer3->is_training());
}

TEST_CASE("a state dict round-trips into a fresh model with the same outputs") {
  manual_seed(5);
  ResNet a(fashion(8));
  a(randn({4, 1, 32, 32}));  // moves the running statistics off their initial values
  manual_seed(6);
  ResNet b(fashion(8));
  b.load_state_dict(a.state_dict());
  a.eval(), b.eval();
  Tensor x = randn({2, 1, 32, 32});
  CHECK(test::max_diff(a(x), b(x)) == 0.0);
}

TEST_CASE("build_model: the main job's models by name") {
  manual_seed(7);
  nn::ModulePtr<> r = build_model("resnet18", {.width = 8});
  CHECK(dynamic_cast<ResNet*>(r.get()) != nullptr);
  CHECK(r(randn({2, 1, 32, 32})).sizes() == Shape{2, 10});
  CHECK(dynamic_cast<nn::Sequential*>(build_model("cnn").get()) != nullptr);
  CHECK(is_sequential_model("mlp"));
  CHECK(!is_sequential_model("resnet18"));
  CHECK(input_size("resnet18") == 32);
  CHECK(input_size("cnn") == 28);
  CHECK_THROWS_WITH(build_model("resnet50"), doctest::Contains("unknown model 'resnet50'"));
}

TEST_CASE("bad options and inputs are refused, naming the value") {
  CHECK_THROWS_WITH(ResNet(ResNetOptions{.width = 0}), doctest::Contains("width must be positive, got 0"));
  CHECK_THROWS_WITH(ResNet(ResNetOptions{.num_classes = -1}), doctest::Contains("num_classes must be positive"));
  ResNet m(fashion(4));
  CHECK_THROWS_WITH(m(randn({2, 3, 32, 32})),
                    doctest::Contains("ResNet: expected input [N, 1, H, W], got shape [2, 3, 32, 32]"));
}
