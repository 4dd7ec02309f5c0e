// Every row of the op-parity table (tests/parity/op_cases.h) on the GPU: the f32 forward and the
// gradients of every input on CUDA against the CPU's, on the same random inputs.
#include <doctest/doctest.h>

#include "gpu_test_util.h"
#include "tests/parity/op_cases.h"

using namespace kiln;

namespace {

struct Run {
  Tensor out;
  std::vector<Tensor> grads;
};

Run run(const kiln::test::OpCase& c, const std::vector<Tensor>& host_inputs, Device device) {
  std::vector<Tensor> in;
  // detach(): on the CPU, to() returns the tensor itself, which must stay a leaf for the GPU run.
  for (const Tensor& t : host_inputs) in.push_back(t.detach().to(device).set_requires_grad(true));
  Run r{c.fn(in), {}};
  Generator g(11);
  Tensor w = rand(r.out.sizes(), kFloat32, &g).to(device);
  if (r.out.requires_grad()) (r.out * w).sum().backward();
  for (const Tensor& t : in) r.grads.push_back(t.grad().defined() ? t.grad().to(kCPU) : zeros_like(t).to(kCPU));
  r.out = r.out.detach().to(kCPU);
  return r;
}

}  // namespace

TEST_CASE("op parity table: CUDA forward and backward match the CPU") {
  KILN_REQUIRE_GPU();
  const Device gpu("cuda:0");
  uint64_t seed = 1;
  for (const auto& c : kiln::test::op_cases()) {
    CAPTURE(c.name);
    std::vector<Tensor> x = kiln::test::make_inputs(c, kFloat32, ++seed);
    Run cpu = run(c, x, kCPU), cuda = run(c, x, gpu);
    const double tol = std::max(10 * c.f32_tol, 1e-4);
    CHECK_MESSAGE(test::allclose(cuda.out, cpu.out, tol, tol), "forward");
    for (size_t i = 0; i < x.size(); ++i)
      CHECK_MESSAGE(test::allclose(cuda.grads[i], cpu.grads[i], tol, tol), "gradient of input ", i);
  }
}
