// CUDA graphs (cuda/graph.h) on a real GPU: captured elementwise ops and a matmul that allocate
// inside the capture replay to the eager result, and follow new contents of the static input;
// a whole training step (forward, loss, backward, SGD) replayed matches the same steps run
// eagerly; .item() inside a capture fails with an error naming it; the graph's private pool is
// released when the graph is destroyed.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "core/device_graph.h"
#include "core/ops.h"
#include "cuda/allocator.h"
#include "cuda/graph.h"
#include "nn/nn.h"
#include "optim/sgd.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

namespace {

const Device kGpu("cuda:0");

/// The captured function: fresh intermediates and a matmul, the result in a new tensor.
Tensor small_program(const Tensor& x, const Tensor& w) {
  Tensor h = relu(matmul(x, w) * 0.5 + 1.0);
  return exp(h * -0.1) + x.sum({1}, /*keepdim=*/true);
}

}  // namespace

TEST_CASE("a captured program replays to the eager result, following its static input") {
  KILN_REQUIRE_GPU();
  manual_seed(1);
  Tensor x = test::random_input({64, 32}, kFloat32, -1, 1).to(kGpu);  // the static input
  Tensor w = test::random_input({32, 48}, kFloat32, -1, 1).to(kGpu);
  Tensor eager_first = small_program(x, w).to(kCPU);
  cuda::Graph graph;
  Tensor out;
  graph.capture([&] { out = small_program(x, w); });
  CHECK(graph.captured());
  CHECK(out.device() == kGpu);
  for (int i = 0; i < 3; ++i) {
    Tensor fresh = test::random_input({64, 32}, kFloat32, -1, 1);
    x.copy_(fresh.to(kGpu));  // in place: the graph reads x's memory
    graph.replay();
    Tensor expected = small_program(x, w).to(kCPU);
    CHECK(test::close_scaled(out, expected, 1e-5));
    CHECK_FALSE(test::close_scaled(out, eager_first, 1e-3));  // a new input gives a new result
  }
}

TEST_CASE("a whole training step replayed matches the same steps run eagerly") {
  KILN_REQUIRE_GPU();
  auto make = [] {
    manual_seed(7);
    nn::ModulePtr<nn::Sequential> m = nn::Sequential{nn::Linear(20, 32), nn::ReLU(), nn::Linear(32, 5)};
    m->to(kGpu);
    return m;
  };
  auto eager = make(), graphed = make();
  optim::SGD eager_opt(eager->parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
  optim::SGD graph_opt(graphed->parameters(), optim::SGDOptions(0.1).set_momentum(0.9));
  auto step = [](nn::Sequential& m, optim::SGD& opt, const Tensor& x, const Tensor& y) {
    opt.zero_grad(/*set_to_none=*/false);
    Tensor loss = nn::functional::cross_entropy(m(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  manual_seed(3);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 6; ++i) {
    xs.push_back(test::random_input({16, 20}, kFloat32, -2, 2).to(kGpu));
    ys.push_back(randint(0, 5, {16}).to(kGpu));
  }
  Tensor static_x = xs[0].clone(), static_y = ys[0].clone();
  // Two eager steps each (the first seeds the momentum buffers), then the graph's captured step.
  for (int i = 0; i < 2; ++i) {
    step(*eager, eager_opt, xs[i], ys[i]);
    static_x.copy_(xs[i]);
    static_y.copy_(ys[i]);
    step(*graphed, graph_opt, static_x, static_y);
  }
  cuda::Graph graph;
  Tensor static_loss;
  graph.capture([&] { static_loss = step(*graphed, graph_opt, static_x, static_y); });  // records, runs nothing
  for (int i = 2; i < 6; ++i) {
    Tensor eager_loss = step(*eager, eager_opt, xs[i], ys[i]);
    static_x.copy_(xs[i]);
    static_y.copy_(ys[i]);
    graph.replay();
    CHECK(static_loss.item<double>() == doctest::Approx(eager_loss.item<double>()).epsilon(1e-5));
  }
  auto pe = eager->parameters(), pg = graphed->parameters();
  for (size_t i = 0; i < pe.size(); ++i) CHECK(test::close_scaled(pg[i], pe[i].to(kCPU), 1e-5));
}

TEST_CASE("core's make_device_graph captures and replays through the CUDA backend") {
  KILN_REQUIRE_GPU();
  CHECK(has_device_graph(DeviceType::CUDA));
  Tensor x = test::random_input({8}, kFloat32, 1, 2).to(kGpu);
  Tensor out;
  auto graph = make_device_graph(kGpu);
  graph->capture([&] { out = x * 3.0; });
  x.fill_(2.0);
  graph->replay();
  CHECK(out.to(kCPU).to_vector<float>() == std::vector<float>(8, 6.0f));
}

TEST_CASE(".item() and host copies inside a capture fail with an error naming the capture") {
  KILN_REQUIRE_GPU();
  Tensor x = test::random_input({16}, kFloat32, 1, 2).to(kGpu);
  {
    cuda::Graph graph;
    CHECK_THROWS_WITH_AS(graph.capture([&] { (void)(x * 2.0).sum().item<double>(); }),
                         doctest::Contains("during a CUDA graph capture"), kiln::Error);
    CHECK_FALSE(graph.captured());
  }
  {
    cuda::Graph graph;
    CHECK_THROWS_WITH_AS(graph.capture([&] { (void)(x + test::random_input({16}, kFloat32, 0, 1).to(kGpu)); }),
                         doctest::Contains("copy cpu -> cuda:0"), kiln::Error);
  }
  // The device and the allocator are fine afterwards: eager work and a new capture run.
  CHECK((x * 2.0).sum().item<double>() > 0);
  cuda::Graph graph;
  Tensor out;
  graph.capture([&] { out = x * 2.0; });
  graph.replay();
  CHECK(test::close_scaled(out, (x * 2.0).to(kCPU), 1e-6));
  CHECK_THROWS_WITH_AS(graph.capture([] {}), doctest::Contains("already captured"), kiln::Error);
}

TEST_CASE("a graph's private memory is released when the graph is destroyed") {
  KILN_REQUIRE_GPU();
  Tensor x = test::random_input({256, 256}, kFloat32, -1, 1).to(kGpu);
  cuda::empty_cache();
  const cuda::MemoryStats before = cuda::memory_stats(0);
  {
    cuda::Graph graph;
    graph.capture([&] { (void)small_program(x, x); });  // every intermediate dies inside the capture
    graph.replay();
    graph.replay();
    const cuda::MemoryStats during = cuda::memory_stats(0);
    CHECK(during.private_pools == before.private_pools + 1);
    CHECK(during.private_reserved > before.private_reserved);
    Tensor eager = x * 2.0;  // eager work does not take the graph's memory
    CHECK(cuda::memory_stats(0).private_reserved == during.private_reserved);
  }
  const cuda::MemoryStats after = cuda::memory_stats(0);
  CHECK(after.private_pools == before.private_pools);
  CHECK(after.private_reserved == before.private_reserved);
  CHECK(after.graph_held == 0);
  CHECK(after.num_raw_frees > before.num_raw_frees);
  MESSAGE(cuda::memory_summary(0));
}
