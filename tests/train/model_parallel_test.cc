// Model parallel in one process (train/model_parallel.h): the main job's CNN split over two
// devices gives the unsplit model's gradients, bit for bit on cpu + cpu and within 1e-4 across a
// GPU (that case runs where one is present and says it skipped otherwise).
#include <doctest/doctest.h>

#include <cstdio>

#include "autograd/autograd.h"
#include "core/generator.h"
#include "train/model_parallel.h"
#include "models/mlp_cnn.h"
#include "nn/nn.h"

namespace kiln {
namespace {

/// The largest gradient difference between the split model and the unsplit one, on one batch.
double max_grad_difference(Device a, Device b) {
  manual_seed(21);
  auto whole = models::make_cnn();
  manual_seed(21);
  train::SplitModel split(*models::make_cnn(), train::kCnnSplit, a, b);
  Generator g(7);
  Tensor x = randn({6, 1, 28, 28}, {}, &g), y = randint(0, 10, {6}, kInt64, &g);
  nn::functional::cross_entropy(whole->forward(x), y).backward();
  Tensor out = split.forward(x);
  CHECK(out.device() == b);
  nn::functional::cross_entropy(out, y.to(b)).backward();
  std::vector<Tensor> pw = whole->parameters(), ps = split.parameters();
  REQUIRE(pw.size() == ps.size());
  double worst = 0;
  for (size_t i = 0; i < pw.size(); ++i) {
    REQUIRE(ps[i].grad().defined());
    CHECK(pw[i].grad().abs().max().item<double>() > 0);  // a real gradient, not zeros on both sides
    worst = std::max(worst, (ps[i].grad().cpu() - pw[i].grad()).abs().max().item<double>());
  }
  return worst;
}

TEST_CASE("the CNN split over cpu + cpu gives exactly the unsplit model's gradients") {
  CHECK(max_grad_difference(kCPU, kCPU) == 0.0);
}

TEST_CASE("the CNN split over the devices present gives the unsplit model's gradients") {
  train::DevicePair d = train::model_parallel_devices();
  if (device_count(DeviceType::CUDA) == 0) {
    CHECK(d.first == kCPU);
    CHECK(d.second == kCPU);
    CHECK(d.note.find("no GPU: cpu + cpu") == 0);
    std::printf("skipped: no CUDA device (the cpu + cuda split needs one; cpu + cpu is tested above)\n");
    MESSAGE("skipped: no CUDA device");
    return;
  }
  CHECK(d.second.is_cuda());
  CHECK(max_grad_difference(d.first, d.second) <= 1e-4);
}

TEST_CASE("a split that leaves a half empty is refused") {
  auto cnn = models::make_cnn();
  CHECK_THROWS_WITH(train::SplitModel(*cnn, 0, kCPU, kCPU),
                    doctest::Contains("SplitModel: cut at layer 0 of 10 leaves a half empty"));
  CHECK_THROWS_WITH(train::SplitModel(*cnn, 10, kCPU, kCPU), doctest::Contains("need 0 < at < 10"));
}

}  // namespace
}  // namespace kiln
