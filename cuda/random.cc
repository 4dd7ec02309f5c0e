// Host side of the CUDA random fills: the same checks and the same generator as the CPU kernels
// (gen.reserve(numel) counters), so a seed fixes the values whatever the device.
#include <limits>

#include "core/kernels.h"
#include "cuda/device.h"
#include "cuda/error.h"
#include "cuda/kernels/launch.h"
#include "cuda/launch_util.h"
#include "cuda/stream.h"

namespace kiln::cuda {
namespace {

void check_out(const Tensor& out, const char* op) {
  KILN_CHECK(out.is_contiguous(), "{}: output must be contiguous (shape {}, strides {})", op, out.sizes(),
             out.strides());
}

void check_floating(const Tensor& out, const char* op) {
  KILN_CHECK(is_floating(out.dtype()), "{}: dtype {} is not supported (floating types only)", op, out.dtype());
}

void uniform_kernel(Tensor& out, Generator& gen, double low, double high) {
  check_out(out, "uniform");
  check_floating(out, "uniform");
  KILN_CHECK(low <= high, "uniform: low {} must not exceed high {}", low, high);
  const GeneratorState st = gen.reserve(static_cast<uint64_t>(out.numel()));
  DeviceGuard g(out.device());
  kern::launch_uniform(scalar_type(out.dtype()), out.data_ptr(), out.numel(), st.seed, st.offset, low, high,
                       stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

void normal_kernel(Tensor& out, Generator& gen, double mean, double std) {
  check_out(out, "normal");
  check_floating(out, "normal");
  KILN_CHECK(std >= 0, "normal: std must be non-negative, got {}", std);
  const GeneratorState st = gen.reserve(static_cast<uint64_t>(out.numel()));
  DeviceGuard g(out.device());
  kern::launch_normal(scalar_type(out.dtype()), out.data_ptr(), out.numel(), st.seed, st.offset, mean, std,
                      stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

void randint_kernel(Tensor& out, Generator& gen, int64_t low, int64_t high) {
  check_out(out, "randint");
  KILN_CHECK(out.dtype() != kBool, "randint: dtype bool is not supported (numeric types only)");
  KILN_CHECK(low < high, "randint: empty range [{}, {})", low, high);
  if (out.dtype() == kInt32)
    KILN_CHECK(low >= std::numeric_limits<int32_t>::lowest() && high - 1 <= std::numeric_limits<int32_t>::max(),
               "randint: range [{}, {}) does not fit dtype {}", low, high, out.dtype());
  const GeneratorState st = gen.reserve(static_cast<uint64_t>(out.numel()));
  DeviceGuard g(out.device());
  kern::launch_randint(scalar_type(out.dtype()), out.data_ptr(), out.numel(), st.seed, st.offset, low, high,
                       stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

void bernoulli_kernel(Tensor& out, Generator& gen, double p) {
  check_out(out, "bernoulli");
  KILN_CHECK(p >= 0 && p <= 1, "bernoulli: probability must be in [0, 1], got {}", p);
  const GeneratorState st = gen.reserve(static_cast<uint64_t>(out.numel()));
  DeviceGuard g(out.device());
  kern::launch_bernoulli(scalar_type(out.dtype()), out.data_ptr(), out.numel(), st.seed, st.offset, p,
                         stream_of(out));
  KILN_CUDA_CHECK_LAUNCH();
}

}  // namespace

KILN_REGISTER_KERNEL(uniform, DeviceType::CUDA, &uniform_kernel);
KILN_REGISTER_KERNEL(normal, DeviceType::CUDA, &normal_kernel);
KILN_REGISTER_KERNEL(randint, DeviceType::CUDA, &randint_kernel);
KILN_REGISTER_KERNEL(bernoulli, DeviceType::CUDA, &bernoulli_kernel);

}  // namespace kiln::cuda
