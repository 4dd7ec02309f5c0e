// Model parallel in one process: parts of one model on different devices, joined by to(device),
// with autograd carrying the gradients back across the copy. It needs a CUDA device (the split is
// cpu + cuda:0; Kiln has no second CPU device to stand in) and skips visibly without one.
#include <doctest/doctest.h>

#include <cstdio>

#include "autograd/autograd.h"
#include "tests/distributed/pipeline/pipeline_helpers.h"
#ifdef KILN_HAVE_CUDA
#include "cuda/device.h"
#endif

namespace kiln {
namespace {

using test::expect;

TEST_CASE("a model split between cpu and cuda:0 gives the unsplit model's gradients") {
#ifndef KILN_HAVE_CUDA
  std::printf("skipped: built without the CUDA toolkit (model parallel needs a second device)\n");
  MESSAGE("skipped: built without the CUDA toolkit");
#else
  if (cuda::device_count() == 0) {
    std::printf("skipped: no CUDA device (model parallel needs a second device)\n");
    MESSAGE("skipped: no CUDA device");
    return;
  }
  const Device gpu(DeviceType::CUDA, 0);
  auto whole = test::pipeline_mlp(9);
  auto split = test::pipeline_mlp(9);
  auto net1 = std::make_shared<nn::Sequential>(), net2 = std::make_shared<nn::Sequential>();
  for (size_t i = 0; i < split->size(); ++i) (i < 3 ? net1 : net2)->push_back((*split)[i]);
  net2->to(gpu);
  test::PipeBatch b = test::pipeline_batch(0, 16);
  test::pipeline_ce(whole->forward(b.x), b.y).backward();
  Tensor h = net1->forward(b.x).to(gpu);  // the activation crosses devices here; its gradient comes back
  test::pipeline_ce(net2->forward(h), b.y.to(gpu)).backward();
  auto pw = whole->named_parameters(), ps = split->named_parameters();
  for (size_t i = 0; i < pw.size(); ++i) {
    double d = (ps[i].second.grad().cpu() - pw[i].second.grad()).abs().max().item<double>();
    CHECK_MESSAGE(d <= 1e-4, pw[i].first << " gradient differs by " << d);
  }
#endif
}

}  // namespace
}  // namespace kiln
