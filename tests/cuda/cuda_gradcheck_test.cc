// Gradients computed on the GPU in f64 against central differences: each check moves its CPU f64
// leaves to cuda:0 inside the function (to() is differentiable), so the forward and backward
// kernels run on the GPU and the finite differences perturb the leaves. Covers elementwise with
// broadcasting, reductions, softmax, matmul/linear, conv2d (cuDNN), pooling, index ops,
// embedding, and the fused cross-entropy, layer norm and batch norm. Skipped without a GPU.
#include <doctest/doctest.h>

#include "core/conv.h"
#include "nn/functional.h"
#include "tests/autograd/grad_test_util.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;
using test::Inputs;
using test::leaf;
namespace F = kiln::nn::functional;

namespace {
const Device kGpu("cuda:0");
Tensor g(const Tensor& t) { return t.to(kGpu); }
Tensor h(const Tensor& t) { return t.to(kCPU); }
}  // namespace

TEST_CASE("elementwise, reductions and softmax: gradients on the GPU") {
  KILN_REQUIRE_GPU();
  manual_seed(1);
  Tensor a = leaf({3, 5}), b = leaf({5}), p = leaf({3, 5}, 0.5, 2.0);
  CHECK_GRAD([](Inputs v) { return h(tanh(g(v[0])) * exp(g(v[1]))); }, a, b);
  CHECK_GRAD([](Inputs v) { return h(gelu(g(v[0])) / g(v[1])); }, a, p);
  CHECK_GRAD([](Inputs v) { return h(sigmoid(g(v[0])).t() + g(v[1]).log().t()); }, a, p);  // non-contiguous
  CHECK_GRAD([](Inputs v) { return h(g(v[0]).sum({1})); }, a);
  CHECK_GRAD([](Inputs v) { return h(g(v[0]).mean({0}, true)); }, a);
  CHECK_GRAD([](Inputs v) { return h(g(v[0]).amax({1})); }, a);
  CHECK_GRAD([](Inputs v) { return h(softmax(g(v[0]), 1)); }, a);
  CHECK_GRAD([](Inputs v) { return h(log_softmax(g(v[0]), 0)); }, a);
}

TEST_CASE("matmul, linear and conv2d: gradients on the GPU") {
  KILN_REQUIRE_GPU();
  manual_seed(2);
  Tensor x = leaf({4, 6}), w = leaf({3, 6}), bias = leaf({3}), bm = leaf({2, 6, 5});
  CHECK_GRAD([](Inputs v) { return h(matmul(g(v[0]), g(v[1]).t())); }, x, w);
  CHECK_GRAD([](Inputs v) { return h(matmul(g(v[0]), g(v[1]))); }, x, bm);  // broadcast batch
  CHECK_GRAD([](Inputs v) { return h(F::linear(g(v[0]), g(v[1]), g(v[2]))); }, x, w, bias);
  Tensor img = leaf({2, 3, 6, 5}), k = leaf({4, 3, 3, 3}), kb = leaf({4});
  CHECK_GRAD([](Inputs v) { return h(conv2d(g(v[0]), g(v[1]), g(v[2]), {1, 1}, {1, 1})); }, img, k, kb);
  CHECK_GRAD([](Inputs v) { return h(conv2d(g(v[0]), g(v[1]), {}, {2, 2}, {0, 1})); }, img, k);
}

TEST_CASE("pooling, index ops and embedding: gradients on the GPU") {
  KILN_REQUIRE_GPU();
  manual_seed(3);
  Tensor img = leaf({2, 2, 6, 6}), x = leaf({5, 4});
  CHECK_GRAD([](Inputs v) { return h(max_pool2d(g(v[0]), {2, 2})); }, img);
  CHECK_GRAD([](Inputs v) { return h(avg_pool2d(g(v[0]), {3, 3}, {2, 2}, {1, 1})); }, img);
  const Tensor idx = tensor({4, 0, 2, 0}, dtype(kInt64)).to(kGpu);
  const Tensor gidx = tensor({1, 0, 3, 3, 2, 1, 0, 0, 2, 1}, dtype(kInt64)).view({5, 2}).to(kGpu);
  CHECK_GRAD([idx](Inputs v) { return h(g(v[0]).index_select(0, idx)); }, x);  // repeated rows
  CHECK_GRAD([gidx](Inputs v) { return h(g(v[0]).gather(1, gidx)); }, x);
  Tensor src = leaf({5, 2});
  CHECK_GRAD([gidx](Inputs v) { return h(scatter_add(g(v[0]), 1, gidx, g(v[1]))); }, x, src);
  CHECK_GRAD([idx](Inputs v) { return h(F::embedding(idx, g(v[0]))); }, x);
}

TEST_CASE("cross-entropy, layer norm and batch norm: gradients on the GPU") {
  KILN_REQUIRE_GPU();
  manual_seed(4);
  Tensor logits = leaf({6, 5});
  const Tensor target = tensor({0, 4, 2, -100, 1, 4}, dtype(kInt64)).to(kGpu);
  CHECK_GRAD([target](Inputs v) { return h(F::cross_entropy(g(v[0]), target)); }, logits);
  CHECK_GRAD([target](Inputs v) { return h(F::cross_entropy(g(v[0]), target, F::Reduction::sum, 0.1)); }, logits);
  Tensor x = leaf({4, 3, 5}), w = leaf({3, 5}), b = leaf({3, 5});
  CHECK_GRAD([](Inputs v) { return h(F::layer_norm(g(v[0]), {3, 5}, g(v[1]), g(v[2]), 1e-5)); }, x, w, b);
  CHECK_GRAD([](Inputs v) { return h(F::layer_norm(g(v[0]), {5}, {}, {}, 1e-5)); }, x);
  Tensor img = leaf({3, 2, 4, 3}), bw = leaf({2}), bb = leaf({2});
  CHECK_GRAD([](Inputs v) { return h(F::batch_norm(g(v[0]), {}, {}, g(v[1]), g(v[2]), true, 0.1, 1e-5)); }, img, bw,
             bb);
  Tensor flat = leaf({7, 3});
  CHECK_GRAD([](Inputs v) { return h(F::batch_norm(g(v[0]), {}, {}, {}, {}, true, 0.1, 1e-5)); }, flat);
}
