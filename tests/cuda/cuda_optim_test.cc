// The fused CUDA optimizer steps (kernels::sgd_step, kernels::adam_step) against the CPU kernels
// over several steps: SGD (plain, momentum, dampening, nesterov, weight decay, maximize) and
// Adam/AdamW (weight decay, amsgrad, maximize) on 100 tensors of odd sizes (1, 3, 70000, ...),
// enough to need several multi-tensor launches, in f32, f64, f16 and bf16, on random non-zero
// inputs. Parameters and every state buffer are compared. Skipped without a GPU.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/kernels.h"
#include "core/ops.h"
#include "cuda/kernels/optim.h"
#include "tests/cuda/gpu_test_util.h"

using namespace kiln;

namespace {

const Device kGpu("cuda:0");
const Device kCpu("cpu");

// 100 sizes: ones, threes, chunk-boundary sizes and 70000 (two chunks). With `huge`, one tensor
// of more chunks than a launch has blocks, so a tensor is split across launches.
std::vector<int64_t> odd_sizes(bool huge) {
  const int64_t c = cuda::kern::kOptimChunk;
  const std::vector<int64_t> pattern = {1, 3, 70000, 129, c - 1, c, c + 1, 17, 4099, 2};
  std::vector<int64_t> sizes;
  for (int i = 0; i < 100; ++i) sizes.push_back(pattern[i % pattern.size()]);
  if (huge) sizes[50] = 330 * c + 7;
  return sizes;
}

// Random values away from zero: N(0, 1) shifted off 0 by a sign-matched 0.1.
Tensor random_nonzero(int64_t n, DType dtype) {
  Tensor r = randn({n}, kFloat64);
  return (r + sign(r) * 0.1).to(dtype);
}

struct TensorLists {
  std::vector<Tensor> cpu, gpu;
};

TensorLists random_lists(const std::vector<int64_t>& sizes, DType dtype) {
  TensorLists l;
  for (int64_t n : sizes) {
    l.cpu.push_back(random_nonzero(n, dtype));
    l.gpu.push_back(l.cpu.back().to(kGpu));
  }
  return l;
}

// Non-negative lists (second moments).
TensorLists random_positive_lists(const std::vector<int64_t>& sizes, DType dtype) {
  TensorLists l = random_lists(sizes, dtype);
  for (size_t i = 0; i < sizes.size(); ++i) {
    l.cpu[i] = (l.cpu[i].to(kFloat64).abs() * 0.01).to(dtype);
    l.gpu[i] = l.cpu[i].to(kGpu);
  }
  return l;
}

void check_lists(const char* what, const TensorLists& l, double tol) {
  for (size_t i = 0; i < l.cpu.size(); ++i) {
    const Tensor gpu = l.gpu[i].to(kCpu).to(kFloat64), cpu = l.cpu[i].to(kFloat64);
    // 16-bit results are held to the tolerance of the list's magnitude: a value that cancels to
    // near zero (momentum * buf + (1 - dampening) * grad) keeps an earlier step's one-ulp
    // rounding difference at the operands' scale (seen on an H200: 0.100 vs 0.112 in bf16, after
    // a rounding at ~2 where one ulp is 0.0156).
    const double scale = tol >= 1e-3 ? std::max(1.0, cpu.abs().max().item<double>()) : 1.0;
    const bool ok = test::allclose(gpu, cpu, tol, tol * scale);
    if (ok) continue;
    // Where it differs most (beyond the tolerance), for the message.
    const Tensor excess = (gpu - cpu).abs() - (cpu.abs() * tol + tol * scale);
    const int64_t at = excess.argmax().item<int64_t>();
    CHECK_MESSAGE(ok, std::string(what), "[", i, "] (", cpu.numel(), " elements) differs from the CPU; worst at ", at,
                  ": gpu ", gpu.select(0, at).item<double>(), " cpu ", cpu.select(0, at).item<double>());
  }
}

std::vector<DType> dtypes() { return {kFloat32, kFloat64, kFloat16, kBFloat16}; }

}  // namespace

TEST_CASE("fused SGD steps on CUDA match the CPU kernel over many tensors") {
  KILN_REQUIRE_GPU();
  auto sgd = [](double lr, double momentum, double dampening, double wd, bool nesterov, bool maximize) {
    SGDStepParams s;
    s.lr = lr;
    s.momentum = momentum;
    s.dampening = dampening;
    s.weight_decay = wd;
    s.nesterov = nesterov;
    s.maximize = maximize;
    return s;
  };
  const std::vector<std::pair<std::string, SGDStepParams>> configs = {
      {"plain", sgd(0.1, 0, 0, 0, false, false)},
      {"momentum", sgd(0.1, 0.9, 0, 0, false, false)},
      {"dampening", sgd(0.05, 0.8, 0.3, 0, false, false)},
      {"nesterov", sgd(0.1, 0.9, 0, 0, true, false)},
      {"weight decay", sgd(0.1, 0.9, 0, 0.05, false, false)},
      {"maximize", sgd(0.1, 0.5, 0.1, 0.01, false, true)},
  };
  for (DType dtype : dtypes()) {
    const std::string dtype_str(dtype_name(dtype));
    CAPTURE(dtype_str);
    const double tol = test::tolerance(dtype);
    for (const auto& [name, s] : configs) {
      CAPTURE(name);
      const std::vector<int64_t> sizes = odd_sizes(dtype == kFloat32 && name == "momentum");
      TensorLists p = random_lists(sizes, dtype);
      TensorLists buf = s.momentum != 0 ? random_lists(sizes, dtype) : TensorLists{};
      for (int step = 0; step < 3; ++step) {
        TensorLists g = random_lists(sizes, dtype);
        kernels::sgd_step[kCpu](p.cpu, g.cpu, buf.cpu, s, step == 0);
        kernels::sgd_step[kGpu](p.gpu, g.gpu, buf.gpu, s, step == 0);
      }
      check_lists("param", p, tol);
      check_lists("momentum_buffer", buf, tol);
    }
  }
}

TEST_CASE("fused Adam and AdamW steps on CUDA match the CPU kernel over many tensors") {
  KILN_REQUIRE_GPU();
  auto adam = [](double lr, double wd, bool decoupled, bool amsgrad, bool maximize) {
    AdamStepParams s;
    s.lr = lr;
    s.beta1 = 0.9;
    s.beta2 = 0.999;
    s.eps = 1e-8;
    s.weight_decay = wd;
    s.decoupled = decoupled;
    s.amsgrad = amsgrad;
    s.maximize = maximize;
    return s;
  };
  const std::vector<std::pair<std::string, AdamStepParams>> configs = {
      {"adam", adam(1e-2, 0, false, false, false)},
      {"adam weight decay", adam(1e-2, 0.1, false, false, false)},
      {"adam amsgrad maximize", adam(1e-2, 0, false, true, true)},
      {"adamw", adam(1e-2, 0.1, true, false, false)},
      {"adamw amsgrad", adam(2e-2, 0.2, true, true, false)},
  };
  for (DType dtype : dtypes()) {
    const std::string dtype_str(dtype_name(dtype));
    CAPTURE(dtype_str);
    const double tol = test::tolerance(dtype);
    for (const auto& [name, base] : configs) {
      CAPTURE(name);
      const std::vector<int64_t> sizes = odd_sizes(dtype == kFloat32 && name == "adamw amsgrad");
      TensorLists p = random_lists(sizes, dtype);
      TensorLists m = random_lists(sizes, dtype);
      TensorLists v = random_positive_lists(sizes, dtype);
      TensorLists vmax = base.amsgrad ? random_positive_lists(sizes, dtype) : TensorLists{};
      for (int t = 1; t <= 3; ++t) {
        AdamStepParams s = base;
        s.step_size = s.lr / (1 - std::pow(s.beta1, t));
        s.bias_corr2_sqrt = std::sqrt(1 - std::pow(s.beta2, t));
        TensorLists g = random_lists(sizes, dtype);
        kernels::adam_step[kCpu](p.cpu, g.cpu, m.cpu, v.cpu, vmax.cpu, s);
        kernels::adam_step[kGpu](p.gpu, g.gpu, m.gpu, v.gpu, vmax.gpu, s);
      }
      check_lists("param", p, tol);
      check_lists("exp_avg", m, tol);
      check_lists("exp_avg_sq", v, tol);
      check_lists("max_exp_avg_sq", vmax, tol);
    }
  }
}

TEST_CASE("the CUDA step kernels refuse mismatched lists, naming the op") {
  KILN_REQUIRE_GPU();
  std::vector<Tensor> p = {random_nonzero(5, kFloat32).to(kGpu)};
  std::vector<Tensor> g = {random_nonzero(4, kFloat32).to(kGpu)};
  std::vector<Tensor> none;
  SGDStepParams s;
  s.lr = 0.1;
  CHECK_THROWS_WITH(kernels::sgd_step[kGpu](p, g, none, s, true), doctest::Contains("sgd_step"));
  std::vector<Tensor> g_cpu = {random_nonzero(5, kFloat32)};
  CHECK_THROWS_WITH(kernels::sgd_step[kGpu](p, g_cpu, none, s, true), doctest::Contains("grads[0]"));
}
